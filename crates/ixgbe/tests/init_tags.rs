//! `init.rs` reads like TinyNF's: every deliberate non-action and every
//! departure from §4.6.3's order carries a tag in one format,
//! `// LEFT ALONE (§x.y): why` or `// DEVIATION (§x.y): why`, and the
//! ones that matter most stand right before the code they explain.

const INIT: &str = include_str!("../src/init.rs");

/// A tag comment: kind, datasheet section, and the start of its reason.
fn parse_tag(comment: &str) -> Option<(&str, &str, &str)> {
    let (kind, rest) = ["LEFT ALONE", "DEVIATION"]
        .iter()
        .find_map(|k| Some((*k, comment.strip_prefix(k)?)))?;
    let rest = rest.strip_prefix(" (§")?;
    let (section, why) = rest.split_once("): ")?;
    let numbered = section
        .split('.')
        .all(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
    (numbered && section.contains('.') && !why.trim().is_empty()).then_some((kind, section, why))
}

/// Every tag: (line index, kind, section, reason), in file order; panics
/// on a comment that names a tag in another format.
fn tags() -> Vec<(usize, &'static str, &'static str, &'static str)> {
    let mut out = Vec::new();
    for (i, line) in INIT.lines().enumerate() {
        let t = line.trim_start();
        let Some(comment) = t.strip_prefix("// ") else {
            assert!(
                !(t.starts_with("//") && !t.starts_with("//!") && !t.starts_with("///")
                    && (t.contains("LEFT ALONE") || t.contains("DEVIATION"))),
                "line {}: a tag must be `// LEFT ALONE (§x.y): why` or `// DEVIATION (§x.y): why`: {t}",
                i + 1
            );
            continue;
        };
        if comment.contains("LEFT ALONE") || comment.contains("DEVIATION") {
            let (kind, section, why) = parse_tag(comment).unwrap_or_else(|| {
                panic!(
                    "line {}: a tag must be `// LEFT ALONE (§x.y): why` or `// DEVIATION (§x.y): why`: {t}",
                    i + 1
                )
            });
            out.push((i, kind, section, why));
        }
        for word in [
            "left alone",
            "Left alone",
            "deviation",
            "Deviation",
            "LEFT-ALONE",
        ] {
            assert!(
                !comment.contains(word),
                "line {}: tag words in another spelling: {t}",
                i + 1
            );
        }
    }
    out
}

/// The first line of code after line `i` (skipping comments and blanks).
fn code_after(i: usize) -> &'static str {
    INIT.lines()
        .skip(i + 1)
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with("//"))
        .unwrap_or("")
}

#[test]
fn every_tag_has_the_one_format() {
    let tags = tags();
    assert!(tags.len() >= 10, "{} tags", tags.len());
}

#[test]
fn the_required_tags_stand_before_their_code() {
    let tags = tags();
    // (kind, section, words in the reason, the code right after the tag's
    // comment block starts with)
    let required = [
        (
            "LEFT ALONE",
            "4.6.3.1",
            "before the reset",
            "init.disable_rx_queues()",
        ),
        (
            "DEVIATION",
            "4.6.3",
            "receive queues",
            "init.disable_rx_queues()",
        ),
        (
            "DEVIATION",
            "4.6.3",
            "bus mastering",
            "let master_disable_fallback = init.master_disable(pci)",
        ),
        (
            "LEFT ALONE",
            "4.6.4",
            "AUTOC",
            "init.map_queue_statistics()",
        ),
        ("DEVIATION", "4.6.3", "RXEN", "init.enable_receive()"),
        (
            "LEFT ALONE",
            "4.6.5",
            "counter",
            "for reg in 0..regs::RQSMR.count()",
        ),
        ("LEFT ALONE", "4.6.3.1", "never enabled", "}"),
    ];
    for (kind, section, words, code) in required {
        let found = tags.iter().any(|&(i, k, s, why)| {
            // The reason may run on over the following comment lines.
            let reason: String = std::iter::once(why)
                .chain(
                    INIT.lines()
                        .skip(i + 1)
                        .map(str::trim)
                        .take_while(|l| l.starts_with("// ") && parse_tag(&l[3..]).is_none())
                        .map(|l| &l[3..]),
                )
                .collect::<Vec<_>>()
                .join(" ");
            k == kind && s == section && reason.contains(words) && code_after(i).starts_with(code)
        });
        assert!(
            found,
            "missing: `// {kind} (§{section}): ...{words}...` before `{code}`"
        );
    }
    // TXPBTHRESH follows §4.6.11.3.4 (no longer a deviation): computed
    // from the largest frame rather than a fixed 2 KB.
    assert!(!tags.iter().any(|t| t.3.contains("threshold")));
    assert!(INIT.contains("tx_threshold_kb(self.cfg.max_frame)"));
}

#[test]
fn a_tag_in_another_format_is_refused() {
    assert!(parse_tag("LEFT ALONE (§4.6.5): the reset cleared them").is_some());
    assert!(parse_tag("DEVIATION (§4.6.11.3.4): 2 KB").is_some());
    for bad in [
        "LEFT ALONE: no section",
        "LEFT ALONE (4.6.5): no section sign",
        "LEFT ALONE (§4): not a subsection",
        "DEVIATION (§4.6.3) no colon",
        "DEVIATION (§4.6.3): ",
        "DEVIATION (§x.y): placeholder",
    ] {
        assert!(parse_tag(bad).is_none(), "{bad}");
    }
}

/// `irq.rs` (interrupt set-up after initialization) tags its
/// non-actions in the same format.
#[test]
fn the_interrupt_set_up_tags_its_non_actions() {
    const IRQ: &str = include_str!("../src/irq.rs");
    let mut n = 0;
    for (i, line) in IRQ.lines().enumerate() {
        let t = line.trim_start();
        if let Some(c) = t.strip_prefix("// ") {
            if c.contains("LEFT ALONE") || c.contains("DEVIATION") {
                assert!(parse_tag(c).is_some(), "irq.rs line {}: {t}", i + 1);
                n += 1;
            }
        }
    }
    assert!(n >= 3, "{n} tags in irq.rs");
}
