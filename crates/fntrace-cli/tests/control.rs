//! Control sockets: sockets left by killed processes are removed (and
//! `fntrace live` on a dead pid says there is no such traced process), and
//! another user who creates `/tmp/fntrace-UID` first does not disable live
//! control for that user (the runtime falls back to an abstract socket,
//! guarded by `SO_PEERCRED` on both sides). The second test acts as two
//! users, so it needs root and `setpriv` (util-linux).

mod common;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};

use common::{fntrace_bin, preload, tool};

/// A program with patchable entries that calls `work` once per input line
/// and answers `ok`; it exits at end of input.
const PROG: &str = "#include <stdio.h>\n\
    #include <unistd.h>\n\
    __attribute__((noinline)) int work(int i) { return i * 7 + 1; }\n\
    int main(void) {\n\
      char buf[64]; int s = 0, i = 0;\n\
      printf(\"ready %d\\n\", getpid()); fflush(stdout);\n\
      while (fgets(buf, sizeof buf, stdin)) { s += work(i++); puts(\"ok\"); fflush(stdout); }\n\
      return s == 12345;\n\
    }\n";

fn build(dir: &Path) -> PathBuf {
    let c = dir.join("prog.c");
    std::fs::write(&c, PROG).unwrap();
    let bin = dir.join("prog");
    tool(
        "gcc",
        &[
            "-O1",
            "-fpatchable-function-entry=5",
            "-o",
            bin.to_str().unwrap(),
            c.to_str().unwrap(),
        ],
    );
    bin
}

struct Traced {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    pid: u32,
}

/// Starts `cmd` (an `fntrace record` of `PROG`) and waits for the program
/// to say it is ready.
fn start(mut cmd: Command) -> Traced {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdin = child.stdin.take().unwrap();
    let mut stdout = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    stdout.read_line(&mut line).unwrap();
    let pid = line
        .trim()
        .strip_prefix("ready ")
        .unwrap_or_else(|| panic!("program printed {line:?}"))
        .parse()
        .unwrap();
    Traced {
        child,
        stdin,
        stdout,
        pid,
    }
}

impl Traced {
    /// One call of `work`.
    fn round(&mut self) {
        writeln!(self.stdin, "go").unwrap();
        let mut l = String::new();
        self.stdout.read_line(&mut l).unwrap();
        assert_eq!(l, "ok\n");
    }
}

fn live(cmd: &mut Command) -> (bool, String, String) {
    let o = cmd.output().unwrap();
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn stale_sockets_are_removed_and_a_dead_pid_is_named() {
    let d = tempfile::tempdir().unwrap();
    let bin = build(d.path());
    // A socket directory of this test's own.
    let run = d.path().join("run");
    std::fs::create_dir(&run).unwrap();
    std::fs::set_permissions(&run, std::fs::Permissions::from_mode(0o700)).unwrap();
    let record = |data: &str| {
        let mut c = Command::new(fntrace_bin());
        c.arg("record")
            .arg("-o")
            .arg(d.path().join(data))
            .arg("--")
            .arg(&bin)
            .env("FNTRACE_PRELOAD", preload())
            .env("XDG_RUNTIME_DIR", &run);
        c
    };
    let mut t = start(record("a.data"));
    t.round();
    let sock = run.join(format!("fntrace/{}.sock", t.pid));
    assert!(sock.exists(), "{} missing", sock.display());
    // Killed: the runtime cannot remove its socket.
    // SAFETY: kills the program this test started.
    unsafe {
        libc::kill(t.pid as i32, libc::SIGKILL);
    }
    t.child.wait().unwrap();
    assert!(sock.exists(), "the killed process's socket is not there");
    let (ok, _, err) = live(
        Command::new(fntrace_bin())
            .args(["live", &t.pid.to_string(), "status"])
            .env("XDG_RUNTIME_DIR", &run),
    );
    assert!(!ok);
    assert_eq!(err.trim_end().lines().count(), 1, "{err}");
    assert!(
        err.contains(&format!("no such traced process {}", t.pid)),
        "{err}"
    );
    assert!(!sock.exists(), "live left the stale socket");
    // A stale socket is also removed when another traced process starts.
    let stale = std::os::unix::net::UnixListener::bind(&sock).unwrap();
    drop(stale);
    assert!(sock.exists());
    let mut t2 = start(record("b.data"));
    t2.round();
    assert!(!sock.exists(), "a new session left the stale socket");
    let (ok, out, err) = live(
        Command::new(fntrace_bin())
            .args(["live", &t2.pid.to_string(), "status"])
            .env("XDG_RUNTIME_DIR", &run),
    );
    assert!(ok && out.contains(&format!("ok pid {}", t2.pid)), "{err}");
    drop(t2.stdin);
    t2.child.wait().unwrap();
}

/// Runs `args` as user `uid` (group `uid`, no supplementary groups).
fn as_user(uid: u32, args: &[&std::ffi::OsStr]) -> Command {
    let mut c = Command::new("setpriv");
    c.arg(format!("--reuid={uid}"))
        .arg(format!("--regid={uid}"))
        .arg("--clear-groups")
        .args(args)
        .env_remove("XDG_RUNTIME_DIR");
    c
}

#[test]
fn a_squatted_socket_directory_does_not_disable_live_control() {
    // SAFETY: geteuid cannot fail.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(euid, 0, "this test acts as two users: run it as root");
    // Two users that own nothing: the traced program's, and a squatter's.
    let (victim, squatter) = (64_123u32, 64_124u32);
    // Everything the victim runs, readable by all.
    let d = tempfile::Builder::new().tempdir_in("/tmp").unwrap();
    std::fs::set_permissions(d.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let bin = build(d.path());
    let exe = d.path().join("fntrace");
    std::fs::copy(fntrace_bin(), &exe).unwrap();
    let lib = d.path().join("libfntrace_preload.so");
    std::fs::copy(preload(), &lib).unwrap();
    let out = d.path().join("out");
    std::fs::create_dir(&out).unwrap();
    std::os::unix::fs::chown(&out, Some(victim), Some(victim)).unwrap();
    // The squatter creates the victim's socket directory first.
    let squat = PathBuf::from(format!("/tmp/fntrace-{victim}"));
    let _ = std::fs::remove_dir_all(&squat);
    std::fs::create_dir(&squat).unwrap();
    std::fs::set_permissions(&squat, std::fs::Permissions::from_mode(0o777)).unwrap();
    std::os::unix::fs::chown(&squat, Some(squatter), Some(squatter)).unwrap();
    let data = out.join("t.data");
    let mut rec = as_user(
        victim,
        &[
            exe.as_os_str(),
            "record".as_ref(),
            "-o".as_ref(),
            data.as_os_str(),
            "--".as_ref(),
            bin.as_os_str(),
        ],
    );
    rec.env("FNTRACE_PRELOAD", &lib);
    let mut t = start(rec);
    t.round();
    let pid = t.pid.to_string();
    let pid = pid.as_str();
    let (ok, out_v, err_v) = live(&mut as_user(
        victim,
        &[
            exe.as_os_str(),
            "live".as_ref(),
            pid.as_ref(),
            "status".as_ref(),
        ],
    ));
    let (ok_s, _, err_s) = live(&mut as_user(
        squatter,
        &[
            exe.as_os_str(),
            "live".as_ref(),
            pid.as_ref(),
            "disable".as_ref(),
            ".".as_ref(),
        ],
    ));
    t.round();
    drop(t.stdin);
    let o = t.child.wait_with_output().unwrap();
    let _ = std::fs::remove_dir_all(&squat);
    let rec_err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{rec_err}");
    assert!(
        ok && out_v.contains(&format!("ok pid {pid} enabled ")),
        "the owner cannot control its process: {err_v} (fntrace record: {rec_err})"
    );
    assert!(!ok_s, "the squatter could control the process");
    assert!(err_s.contains("refused"), "{err_s}");
}
