//! Errors that are true: bad options and paths fail before the program runs
//! with one line naming the option or file; patterns that match nothing
//! warn; a failed export leaves no file behind; views a `--count` trace
//! cannot have say so in one line.

mod common;

use std::path::Path;
use std::process::{Command, Output};

use common::{FIB_C, fntrace_bin, preload, record_cmd, tool};

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// `fib.c` built with `-pg -mfentry` in `dir`.
fn fib_fentry(dir: &Path) -> std::path::PathBuf {
    let bin = dir.join("fib");
    tool(
        "gcc",
        &[
            "-O2",
            "-fno-optimize-sibling-calls",
            "-pg",
            "-mfentry",
            "-o",
            bin.to_str().unwrap(),
            FIB_C,
        ],
    );
    bin
}

#[test]
fn an_output_path_that_cannot_be_written_fails_before_running() {
    let d = tempfile::tempdir().unwrap();
    let mark = d.path().join("ran");
    let o = record_cmd(
        Path::new("/nonexistent/x.data"),
        &[],
        Path::new("touch"),
        &[mark.to_str().unwrap()],
    )
    .output()
    .unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(
        err.contains("/nonexistent/x.data") && err.contains("No such file or directory"),
        "{err}"
    );
    assert!(!mark.exists(), "the program ran");
}

#[test]
fn bad_max_sizes_are_rejected() {
    let d = tempfile::tempdir().unwrap();
    let mark = d.path().join("ran");
    for bad in ["abc", "12Q", "-5", "99999999999999999999999G", ""] {
        let o = record_cmd(
            &d.path().join("t.data"),
            &[&format!("--max-size={bad}")],
            Path::new("touch"),
            &[mark.to_str().unwrap()],
        )
        .output()
        .unwrap();
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{bad:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        assert!(err.contains("--max-size"), "{err}");
        assert!(!mark.exists(), "{bad:?}: the program ran");
    }
}

#[test]
fn patterns_that_match_no_function_warn() {
    let d = tempfile::tempdir().unwrap();
    let bin = fib_fentry(d.path());
    let data = d.path().join("t.data");
    let o = record_cmd(
        &data,
        &[
            "-A",
            "nosuchfunc@arg1",
            "-R",
            "nosuchret",
            "-F",
            "^nosuchfilter",
            "-N",
            "nosuchnotrace",
            "-A",
            "fib@arg1",
        ],
        &bin,
        &["10"],
    )
    .output()
    .unwrap();
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    for (opt, p) in [
        ("-A", "nosuchfunc@arg1"),
        ("-R", "nosuchret"),
        ("-F", "^nosuchfilter"),
        ("-N", "nosuchnotrace"),
    ] {
        assert!(
            err.contains(&format!("warning: {opt} {p:?} matches none of the")),
            "{opt} {p}: {err}"
        );
    }
    assert!(!err.contains("\"fib@arg1\" matches none"), "{err}");
}

#[test]
fn a_failed_export_leaves_no_file() {
    let d = tempfile::tempdir().unwrap();
    let bin = fib_fentry(d.path());
    let data = d.path().join("t.data");
    let o = record_cmd(&data, &[], &bin, &["10"]).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    // A gcc build has no XRay instrumentation map: the XRay export fails.
    let out = d.path().join("x.log");
    let o = Command::new(fntrace_bin())
        .arg("export")
        .arg(&data)
        .args(["--format", "xray", "-o"])
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(!out.exists(), "a failed export left {}", out.display());
    // An earlier file of that name is left as it was.
    std::fs::write(&out, "earlier").unwrap();
    let o = Command::new(fntrace_bin())
        .arg("export")
        .arg(&data)
        .args(["--format", "xray", "-o"])
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "earlier");
    let left: Vec<_> = std::fs::read_dir(d.path())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().contains(".tmp"))
        .collect();
    assert!(left.is_empty(), "temporary files left: {left:?}");
}

#[test]
fn flame_graphs_of_a_count_trace_say_why_not() {
    let d = tempfile::tempdir().unwrap();
    let bin = fib_fentry(d.path());
    let data = d.path().join("c.data");
    let o = Command::new(fntrace_bin())
        .args(["record", "--count", "-o"])
        .arg(&data)
        .arg("--")
        .arg(&bin)
        .arg("12")
        .env("FNTRACE_PRELOAD", preload())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    for f in ["html", "flamegraph"] {
        let out = d.path().join(format!("out.{f}"));
        let o = Command::new(fntrace_bin())
            .arg("export")
            .arg(&data)
            .args(["--format", f, "-o"])
            .arg(&out)
            .output()
            .unwrap();
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{f}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{err}");
        assert!(err.contains("--count trace"), "{err}");
        assert!(!out.exists());
    }
}

/// Runs `c` to its end, failing the test if it takes more than `secs`
/// seconds (a bug that makes it run away must not hang the suite).
fn output_within(mut c: Command, secs: u64) -> Output {
    use std::process::Stdio;
    let mut child = c
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > std::time::Duration::from_secs(secs) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("still running after {secs} s: {c:?}");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// Asserts `err` is one line that names `path` and contains `what`.
fn one_line_naming(err: &str, path: &Path, what: &str) {
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(err.contains(&path.display().to_string()), "{err}");
    assert!(err.contains(what), "{err}");
}

#[test]
fn record_refuses_to_move_aside_what_is_not_a_trace_file() {
    use std::os::unix::fs::FileTypeExt;
    let d = tempfile::tempdir().unwrap();
    let mark = d.path().join("ran");
    let record = |out: &Path| {
        record_cmd(out, &[], Path::new("touch"), &[mark.to_str().unwrap()])
            .output()
            .unwrap()
    };
    let dir = d.path().join("dir");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("f"), "kept").unwrap();
    let fifo = d.path().join("fifo");
    tool("mkfifo", &[fifo.to_str().unwrap()]);
    let link = d.path().join("link");
    std::os::unix::fs::symlink(&dir, &link).unwrap();
    let dangling = d.path().join("dangling");
    std::os::unix::fs::symlink(d.path().join("nothing"), &dangling).unwrap();
    for (out, what) in [
        (&dir, "it is a directory"),
        (&fifo, "it is a FIFO"),
        (&link, "it is a symbolic link to a directory"),
        (&dangling, "it is a dangling symbolic link"),
    ] {
        let o = record(out);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{err}");
        one_line_naming(&err, out, what);
        assert!(!mark.exists(), "{}: the program ran", out.display());
    }
    assert_eq!(std::fs::read_to_string(dir.join("f")).unwrap(), "kept");
    assert!(std::fs::metadata(&fifo).unwrap().file_type().is_fifo());
    assert!(std::fs::symlink_metadata(&link).unwrap().is_symlink());
    assert!(std::fs::symlink_metadata(&dangling).unwrap().is_symlink());
    for p in [&dir, &fifo, &link, &dangling] {
        let mut old = p.as_os_str().to_owned();
        old.push(".old");
        assert!(
            std::fs::symlink_metadata(&old).is_err(),
            "{} was moved aside",
            p.display()
        );
    }

    // The `.old` file an earlier trace would replace, and a child's
    // `OUTPUT.PID`, must be files too: nothing moves when one is not.
    let data = d.path().join("t.data");
    std::fs::write(&data, "earlier").unwrap();
    let old = d.path().join("t.data.old");
    std::fs::create_dir(&old).unwrap();
    let o = record(&data);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    one_line_naming(&err, &old, "is a directory");
    assert!(std::fs::metadata(&old).unwrap().is_dir());
    std::fs::remove_dir(&old).unwrap();
    let child = d.path().join("t.data.123");
    std::fs::create_dir(&child).unwrap();
    let o = record(&data);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    one_line_naming(&err, &child, "is a directory");
    assert!(std::fs::metadata(&child).unwrap().is_dir());
    assert_eq!(std::fs::read_to_string(&data).unwrap(), "earlier");
    assert!(!old.exists() && !mark.exists());
    std::fs::remove_dir(&child).unwrap();

    // A symbolic link to a regular file is moved aside as a link: the
    // file it leads to is left as it was.
    let target = d.path().join("target");
    std::fs::write(&target, "earlier").unwrap();
    let slink = d.path().join("s.data");
    std::os::unix::fs::symlink(&target, &slink).unwrap();
    let o = record(&slink);
    assert!(o.status.success(), "{}", stderr(&o));
    let sold = d.path().join("s.data.old");
    assert_eq!(std::fs::read_link(&sold).unwrap(), target);
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "earlier");
    assert!(std::fs::symlink_metadata(&slink).unwrap().is_file());
}

#[test]
fn absurd_trace_sizes_and_depth_0_are_refused_before_running() {
    let d = tempfile::tempdir().unwrap();
    let mark = d.path().join("ran");
    let data = d.path().join("t.data");
    for (opts, opt) in [
        (["--ring", "18446744073709551615"], "--ring"),
        (["--ring", "1000000000G"], "--ring"),
        (["--ring", "16385G"], "--ring"),
        (["--max-size", "0"], "--max-size"),
        (["--max-size", "100K"], "--max-size"),
        (["--max-size", "16385G"], "--max-size"),
        (["-D", "0"], "--depth"),
    ] {
        let o = record_cmd(&data, &opts, Path::new("touch"), &[mark.to_str().unwrap()])
            .output()
            .unwrap();
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{opts:?}: {err}");
        assert_eq!(err.trim_end().lines().count(), 1, "{opts:?}: {err}");
        assert!(err.contains(opt), "{opts:?}: {err}");
        assert!(!mark.exists(), "{opts:?}: the program ran");
        assert!(!data.exists(), "{opts:?}: a trace was left");
    }
    // The smallest --max-size is accepted.
    let bin = fib_fentry(d.path());
    let o = record_cmd(&data, &["--max-size", "132K"], &bin, &["5"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
fn a_trace_the_runtime_cannot_set_up_fails_record() {
    let d = tempfile::tempdir().unwrap();
    let bin = fib_fentry(d.path());
    let data = d.path().join("t.data");
    // 2 GiB of address space: the runtime cannot reserve the default
    // 16G --max-size, so the program runs untraced.
    let rec = record_cmd(&data, &[], &bin, &["10"]);
    let mut sh = Command::new("sh");
    sh.arg("-c")
        .arg("ulimit -v 2097152 && exec \"$@\"")
        .arg("sh")
        .arg(rec.get_program())
        .args(rec.get_args())
        .envs(rec.get_envs().filter_map(|(k, v)| Some((k, v?))));
    let o = sh.output().unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains(&format!("no trace recorded into {}", data.display()))
            && err.contains("ran untraced (exit status 0)"),
        "{err}"
    );
    assert!(!err.contains("bad magic"), "{err}");
    assert!(!data.exists(), "an empty trace was left");
}

/// A trace of `fib 10` recorded in `dir`.
fn fib_trace(dir: &Path) -> std::path::PathBuf {
    let bin = fib_fentry(dir);
    let data = dir.join("t.data");
    let o = record_cmd(&data, &[], &bin, &["10"]).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    data
}

/// `fntrace export TRACE --format folded -o OUT`.
fn export_folded(trace: &Path, out: &Path) -> Output {
    Command::new(fntrace_bin())
        .arg("export")
        .arg(trace)
        .args(["--format", "folded", "-o"])
        .arg(out)
        .output()
        .unwrap()
}

#[test]
fn export_writes_through_devices_fifos_and_links() {
    use std::os::unix::fs::FileTypeExt;
    let d = tempfile::tempdir().unwrap();
    let data = fib_trace(d.path());
    let plain = d.path().join("plain.folded");
    let o = export_folded(&data, &plain);
    assert!(o.status.success(), "{}", stderr(&o));
    let expect = std::fs::read(&plain).unwrap();
    assert!(!expect.is_empty());

    // A FIFO is written, not replaced.
    let fifo = d.path().join("fifo");
    tool("mkfifo", &[fifo.to_str().unwrap()]);
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || std::fs::read(fifo).unwrap())
    };
    let o = export_folded(&data, &fifo);
    if !o.status.success() {
        // Let the reader end before failing.
        drop(std::fs::OpenOptions::new().write(true).open(&fifo));
        panic!("{}", stderr(&o));
    }
    // (Checked first: the reader of a replaced FIFO waits forever.)
    assert!(
        std::fs::symlink_metadata(&fifo)
            .unwrap()
            .file_type()
            .is_fifo(),
        "the FIFO was replaced"
    );
    assert_eq!(reader.join().unwrap(), expect);

    // A symbolic link is written through: the link stays, the file it
    // leads to (existing or not) gets the export.
    let target = d.path().join("target");
    std::fs::write(&target, "earlier").unwrap();
    let link = d.path().join("link");
    std::os::unix::fs::symlink("target", &link).unwrap();
    let dangling = d.path().join("dangling");
    std::os::unix::fs::symlink("new", &dangling).unwrap();
    for (l, t) in [(&link, &target), (&dangling, &d.path().join("new"))] {
        let o = export_folded(&data, l);
        assert!(o.status.success(), "{}", stderr(&o));
        assert!(std::fs::symlink_metadata(l).unwrap().is_symlink());
        assert_eq!(std::fs::read(t).unwrap(), expect, "{}", l.display());
    }

    // No temporary file is left anywhere.
    let left: Vec<_> = std::fs::read_dir(d.path())
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
        .collect();
    assert!(left.is_empty(), "temporary files left: {left:?}");

    // A character device stays one. Last, and only once the FIFO above
    // (the same path of the export, inside the tempdir) was written in
    // place: a build that still replaced special files would replace the
    // machine's /dev/null.
    let null = Path::new("/dev/null");
    let o = export_folded(&data, null);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        std::fs::symlink_metadata(null)
            .unwrap()
            .file_type()
            .is_char_device(),
        "/dev/null was replaced"
    );
}

#[test]
fn export_refuses_a_directory_and_its_own_input() {
    let d = tempfile::tempdir().unwrap();
    let data = fib_trace(d.path());
    let before = std::fs::read(&data).unwrap();
    let dir = d.path().join("dir");
    std::fs::create_dir(&dir).unwrap();
    let link = d.path().join("link");
    std::os::unix::fs::symlink("t.data", &link).unwrap();
    for (out, what) in [
        (&dir, "it is a directory"),
        (&data, "it is the trace being exported"),
        (&link, "it is the trace being exported"),
    ] {
        let o = export_folded(&data, out);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{err}");
        // No "wrote N stacks" before the error.
        one_line_naming(&err, out, what);
        assert!(!err.contains("wrote"), "{err}");
    }
    assert_eq!(std::fs::read(&data).unwrap(), before, "the input changed");
    assert!(std::fs::read_dir(&dir).unwrap().next().is_none());
    assert!(std::fs::symlink_metadata(&link).unwrap().is_symlink());
}

#[test]
fn export_removes_the_temporary_files_of_killed_exports() {
    let d = tempfile::tempdir().unwrap();
    let data = fib_trace(d.path());
    let out = d.path().join("out.folded");
    // The temporary file of an export whose process is gone, and one of
    // a live process (this one) that must stay.
    let mut dead = Command::new("true").spawn().unwrap();
    let dead_pid = dead.id();
    dead.wait().unwrap();
    let stale = d.path().join(format!(".out.folded.fntrace-{dead_pid}.tmp"));
    let live = d
        .path()
        .join(format!(".out.folded.fntrace-{}.tmp", std::process::id()));
    std::fs::write(&stale, "partial").unwrap();
    std::fs::write(&live, "partial").unwrap();
    let o = export_folded(&data, &out);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!stale.exists(), "the stale temporary file is still there");
    assert!(live.exists(), "a live process's temporary file was removed");
}

/// The `(from, self, count)` arc records of a gmon.out file.
fn gmon_arcs(b: &[u8]) -> Vec<(u64, u64, u32)> {
    let u64_at = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap());
    let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().unwrap());
    assert_eq!(&b[..4], b"gmon");
    let (mut i, mut arcs) = (20, vec![]);
    while i < b.len() {
        match b[i] {
            0 => i += 1 + 8 + 8 + 4 + 4 + 15 + 1 + 2 * u32_at(i + 17) as usize,
            1 => {
                arcs.push((u64_at(i + 1), u64_at(i + 9), u32_at(i + 17)));
                i += 21;
            }
            t => panic!("gmon.out: tag {t} at byte {i}"),
        }
    }
    arcs
}

#[test]
fn gmon_export_of_an_absurd_arc_count_is_bounded_and_says_so() {
    use fntrace_format::event::Framed;
    use fntrace_format::layout::{
        ChunkHeader, DEFAULT_CHUNK_SIZE, FINAL_FLAG_CLEAN, Final, Header, META_TID,
    };
    use fntrace_format::writer::TraceBuilder;
    let d = tempfile::tempdir().unwrap();
    let bin = fib_fentry(d.path());
    // The link-time addresses of main and fib (the module is mapped
    // without bias).
    let nm = tool("nm", &[bin.to_str().unwrap()]);
    let addr = |name: &str| {
        nm.lines()
            .find_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                (f.len() == 3 && f[2] == name).then(|| u64::from_str_radix(f[0], 16).unwrap())
            })
            .unwrap_or_else(|| panic!("no {name} in {nm}"))
    };
    let (main, fib) = (addr("main"), addr("fib"));
    let mut b = TraceBuilder::new(Header {
        start_tsc: 1000,
        pid: 7,
        ..Header::current(DEFAULT_CHUNK_SIZE, 1_000_000_000)
    });
    let mut meta = b.new_chunk(&ChunkHeader::at(META_TID, 0, 0, 1000));
    let path = bin.to_str().unwrap().as_bytes();
    for rec in [
        Framed::Module {
            bias: 0,
            start: 0,
            size: 1 << 40,
            build_id: b"",
            path,
        },
        Framed::Arc {
            from: main + 1,
            to: fib,
            count: 1 << 62,
        },
        Framed::Arc {
            from: fib + 1,
            to: fib,
            count: 5,
        },
    ] {
        assert!(meta.framed(&rec));
    }
    meta.seal();
    b.push_chunk(&meta);
    let chunks = b.chunks();
    let bytes = b.finish(&Final {
        flags: FINAL_FLAG_CLEAN,
        end_tsc: 2000,
        tsc_hz: 1_000_000_000,
        chunks,
        ..Final::default()
    });
    let data = d.path().join("c.data");
    std::fs::write(&data, bytes).unwrap();

    let out = d.path().join("gmon.out");
    let mut c = Command::new(fntrace_bin());
    c.arg("export")
        .arg(&data)
        .args(["--format", "gmon", "-o"])
        .arg(&out);
    let o = output_within(c, 60);
    let err = stderr(&o);
    assert!(o.status.success(), "{err}");
    let warnings: Vec<&str> = err.lines().filter(|l| l.contains("warning")).collect();
    assert_eq!(warnings.len(), 1, "{err}");
    assert!(
        warnings[0].contains("main -> fib") && warnings[0].contains(&(1u64 << 62).to_string()),
        "{err}"
    );
    let arcs = gmon_arcs(&std::fs::read(&out).unwrap());
    // The capped arc: 16 full records; the other as it was.
    let capped: Vec<_> = arcs.iter().filter(|a| a.0 == main + 1).collect();
    assert_eq!(capped.len(), 16, "{arcs:?}");
    assert!(capped.iter().all(|a| a.1 == fib && a.2 == u32::MAX));
    assert!(arcs.contains(&(fib + 1, fib, 5)), "{arcs:?}");
    assert_eq!(arcs.len(), 17, "{arcs:?}");
}

/// A `--tid` that names no thread of the trace is one line naming it and
/// the threads there are, and exit status 2, in every view and export
/// (replay printed only its header and the exports wrote empty files).
#[test]
fn an_unknown_thread_is_refused_by_every_view() {
    let d = tempfile::tempdir().unwrap();
    let bin = fib_fentry(d.path());
    let data = d.path().join("t.data");
    let o = record_cmd(&data, &[], &bin, &["10"]).output().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let out = d.path().join("x.out");
    let data_s = data.to_str().unwrap();
    let out_s = out.to_str().unwrap();
    for args in [
        vec!["report", "--tid", "1", data_s],
        vec!["replay", "--tid", "1", data_s],
        vec!["graph", "fib", "--tid", "1", data_s],
        vec![
            "export", data_s, "--format", "chrome", "-o", out_s, "--tid", "1",
        ],
        vec![
            "export", data_s, "--format", "folded", "-o", out_s, "--tid", "1",
        ],
    ] {
        let o = Command::new(fntrace_bin()).args(&args).output().unwrap();
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(err.lines().count(), 1, "{args:?}: {err}");
        assert!(err.contains("1"), "{args:?}: {err}");
        assert!(!out.exists(), "{args:?} wrote {}", out.display());
    }
}

/// An instrumented program that removes its own trace while it runs: one
/// line saying the trace is gone (it once got the advice to rebuild with
/// instrumentation), exit status 2.
#[test]
fn a_trace_removed_while_the_program_ran_is_named_as_such() {
    let d = tempfile::tempdir().unwrap();
    let src = d.path().join("unl.c");
    std::fs::write(
        &src,
        "#include <unistd.h>\n\
         __attribute__((noinline)) int leaf(int x) { return x + 1; }\n\
         int main(int argc, char **argv) { (void)argc; int s = leaf(1); unlink(argv[1]); return s - 2; }\n",
    )
    .unwrap();
    let bin = d.path().join("unl");
    tool(
        "gcc",
        &[
            "-O2",
            "-pg",
            "-o",
            bin.to_str().unwrap(),
            src.to_str().unwrap(),
        ],
    );
    let data = d.path().join("t.data");
    let o = record_cmd(&data, &[], &bin, &[data.to_str().unwrap()])
        .output()
        .unwrap();
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("is not there: it was removed while the program ran"),
        "{err}"
    );
    assert!(!err.contains("Rebuild"), "{err}");
}
