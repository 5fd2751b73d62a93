//! The README's main command: `nfkit demo` on simulated 82599s, with no
//! root, hugepages or NIC, for both driver models. Every frame must be
//! accounted for and the model must record no datasheet violation.

use std::process::Command;

fn demo(model: &str) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_nfkit"))
        .args(["demo", "--seconds", "1", "--model", model])
        .output()
        .expect("running nfkit demo");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "nfkit demo --model {model} failed:\n{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

fn field(text: &str, label: &str) -> u64 {
    text.lines()
        .find(|l| l.trim_start().starts_with(label))
        .and_then(|l| l.split_whitespace().last()?.parse().ok())
        .unwrap_or_else(|| panic!("no `{label}` line in:\n{text}"))
}

#[test]
fn demo_forwards_and_accounts_for_every_frame_in_both_models() {
    for model in ["queue", "agent"] {
        let text = demo(model);
        assert!(text.contains("[Device: sim:0] RX:"), "{text}");
        assert!(text.contains("counters add up: yes"), "{text}");
        assert!(text.contains("driver cost, lock-step: "), "{text}");
        assert_eq!(field(&text, "datasheet violations"), 0, "{text}");
        assert!(field(&text, "forwarded") > 0, "{text}");
        assert_eq!(
            field(&text, "forwarded"),
            field(&text, "counted by the sinks"),
            "{text}"
        );
    }
}
