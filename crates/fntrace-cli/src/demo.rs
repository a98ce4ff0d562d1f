//! `fntrace demo`: records the bundled instrumented workload (the
//! `fntrace` binary itself, run as `fntrace __demo-workload N`) and shows
//! its report and replay.

use std::io::Write;
use std::path::PathBuf;

use crate::Result;
use crate::record;
use crate::replay::{ReplayOptions, write_replay};
use crate::report::{Format, SortKey, report_rows, write_report};
use crate::tracefile::open;

/// The argument the `fntrace` binary runs its demo workload with.
pub const WORKLOAD_COMMAND: &str = "__demo-workload";

/// `fntrace demo N`: records `fntrace __demo-workload N` into a temporary
/// directory, prints `fntrace report` and `fntrace replay --depth 3` of
/// it, and removes the directory.
pub fn run(out: &mut dyn Write, n: u64) -> Result<()> {
    let dir = std::env::temp_dir().join(format!("fntrace-demo-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let data = dir.join("demo.data");
    let me: PathBuf = std::env::current_exe()?;
    let cmd = vec![
        me.display().to_string(),
        WORKLOAD_COMMAND.into(),
        n.to_string(),
    ];
    writeln!(
        out,
        "$ fntrace record -o {} -- fntrace-demo {n}",
        data.display()
    )?;
    out.flush()?;
    record::run(&data, &record::Options::default(), &cmd)?;
    let t = open(&data)?;
    writeln!(out, "\n$ fntrace report")?;
    write_report(out, &report_rows(&t, false, SortKey::Total), Format::Table)?;
    writeln!(out, "\n$ fntrace replay --depth 3")?;
    write_replay(
        out,
        &t,
        &ReplayOptions {
            depth: Some(3),
            ..Default::default()
        },
    )?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}
