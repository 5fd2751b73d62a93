//! Instructions per packet from callgrind: a lock-step entry point of
//! `nfkit-bench` run under valgrind, collecting only inside its rounds.

use anyhow::{bail, Context, Result};

/// Run this executable (`nfkit-bench`) with `args` (a lock-step subcommand that prints
/// `forwarded N`) under callgrind, collecting only inside functions whose
/// names contain `round`, and return the instructions spent there per
/// forwarded packet; `None` without valgrind.
pub fn per_packet(round: &str, args: &[&str]) -> Result<Option<f64>> {
    let exe = std::env::current_exe()?;
    let out = std::env::temp_dir().join(format!(
        "nfkit-callgrind-{}-{round}.out",
        std::process::id()
    ));
    let status = std::process::Command::new("valgrind")
        .args([
            "--tool=callgrind",
            &format!("--toggle-collect=*{round}*"),
            // A register write lands in the model's BAR (device work, not
            // driver work): collection toggles off inside it, so only the
            // call itself counts, as a store to a real BAR would.
            "--toggle-collect=*SimBar*write32*",
            &format!("--callgrind-out-file={}", out.display()),
        ])
        .arg(&exe)
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .output();
    let output = match status {
        Ok(o) if o.status.success() => o,
        Ok(o) => bail!("callgrind run of `{}` failed: {}", args.join(" "), o.status),
        Err(_) => return Ok(None),
    };
    let forwarded: u64 = String::from_utf8_lossy(&output.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("forwarded ")?.trim().parse().ok())
        .context("the lock-step run did not report its packets")?;
    if forwarded == 0 {
        bail!("`{}` forwarded nothing", args.join(" "));
    }
    let text = std::fs::read_to_string(&out).context("reading callgrind output")?;
    let _ = std::fs::remove_file(&out);
    let total = round_instructions(&text, round)
        .with_context(|| format!("no `{round}` call in callgrind output"))?;
    Ok(Some(total as f64 / forwarded as f64))
}

/// Instructions spent inside the rounds: the inclusive cost of every call
/// to a function whose name contains `round`, from callgrind's output.
///
/// Not the file's `totals`: the `SimBar::write32` toggle also switches
/// collection *on* inside every register write made outside a round
/// (device initialization, queue start and stop), which would count the
/// model's reset and set-up work. A call's inclusive cost only holds what
/// was collected during it, so this sum is the rounds' own work (inside a
/// round the toggle switches the model's share of a BAR write off).
///
/// The format (callgrind's "Callgrind Format" docs): `fn=`/`cfn=` name
/// the current and the called function, compressed as `(id) name` the
/// first time and `(id)` afterwards; a `calls=` line is followed by one
/// cost line `position inclusive-cost...` for that call.
pub fn round_instructions(callgrind_out: &str, round: &str) -> Option<u64> {
    let mut names = std::collections::HashMap::new();
    let mut callee_is_round = false;
    let mut after_calls = false;
    let mut total = None;
    for line in callgrind_out.lines() {
        if after_calls {
            after_calls = false;
            if callee_is_round {
                let cost: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
                *total.get_or_insert(0) += cost;
            }
            continue;
        }
        if let Some(rest) = line.strip_prefix("cfn=") {
            callee_is_round = function_name(rest, &mut names).contains(round);
        } else if let Some(rest) = line.strip_prefix("fn=") {
            function_name(rest, &mut names);
        } else if line.starts_with("calls=") {
            after_calls = true;
        }
    }
    total
}

/// Resolve a possibly compressed callgrind function name, `(id) name` or
/// `(id)`, remembering new ids.
fn function_name<'a>(
    spec: &'a str,
    names: &mut std::collections::HashMap<&'a str, &'a str>,
) -> &'a str {
    match spec.strip_prefix('(').and_then(|s| s.split_once(')')) {
        Some((id, "")) => names.get(id).copied().unwrap_or(""),
        Some((id, name)) => {
            let name = name.trim_start();
            names.insert(id, name);
            name
        }
        None => spec,
    }
}

#[cfg(test)]
mod tests {
    use super::round_instructions;

    #[test]
    fn only_calls_into_driver_rounds_count() {
        // Two calls to a round (one by a compressed name), and a register
        // write during set-up whose cost must not count.
        let out = "\
events: Ir
fn=(1) nfkit_bench::drivers::lockstep
cfn=(2) nfkit_bench::drivers::driver_round_agent
calls=3 86
10 900
cfn=(3) <SimBar as Bar>::write32
calls=1 20
+2 5000
cfn=(2)
calls=1 86
12 100
fn=(2)
5 1000
totals: 7000
";
        assert_eq!(round_instructions(out, "driver_round_"), Some(1000));
        assert_eq!(
            round_instructions("events: Ir\ntotals: 5\n", "driver_round_"),
            None
        );
    }
}
