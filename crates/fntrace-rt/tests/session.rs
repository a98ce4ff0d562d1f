//! A session started from a configuration handed over at run time (no
//! environment variable involved): its policy applies (here the depth
//! limit and `-N`), a second start is refused without disturbing it, and
//! the trace holds exactly the calls the configuration selects, properly
//! nested.

use fntrace_format::{Record, Trace};
use fntrace_rt::config::Config;
use fntrace_rt::session::{self, StartError};
use fntrace_rt::site::{Site, enter};

/// `depth` levels of `outer`, each calling `skipped` once (a `-N`
/// function, itself calling `outer(0)`, which must not be recorded).
fn outer(depth: u32) {
    static SITE: Site = Site::new("sess::outer", file!(), line!());
    let _g = enter(&SITE);
    if depth > 0 {
        outer(depth - 1);
        skipped();
    }
}

fn skipped() {
    static SITE: Site = Site::new("sess::skipped", file!(), line!());
    let _g = enter(&SITE);
    outer(0);
}

#[test]
fn a_session_starts_from_a_config_handed_over_at_run_time() {
    let dir = std::env::temp_dir().join(format!("fntrace-session-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("t.data");
    let mut cfg = Config::with_output(&path);
    cfg.depth = 3;
    cfg.notrace = vec!["skipped".into()];
    assert_eq!(session::start(&cfg).unwrap(), path);
    // A second start is refused and leaves the running policy alone.
    let mut other = Config::with_output(dir.join("u.data"));
    other.depth = 1;
    assert!(matches!(
        session::start(&other),
        Err(StartError::AlreadyActive)
    ));
    assert!(!dir.join("u.data").exists());
    outer(5);
    let sum = session::finish().expect("a session was active");
    let t = Trace::open(&sum.path).unwrap();
    assert!(t.damage().is_empty(), "{:?}", t.damage());
    let names: std::collections::HashMap<u64, String> = t
        .metadata()
        .sites
        .iter()
        .map(|(k, s)| (*k, s.name.clone()))
        .collect();
    let tid = t.thread_ids()[0];
    // The recorded tree: outer(5) > outer(4) > outer(3), depth 3; no
    // `skipped` and nothing under it.
    let mut depth = 0u32;
    let mut entries = vec![];
    for r in t.stream(tid) {
        match r {
            Record::Entry { func, .. } => {
                depth += 1;
                entries.push((depth, names[&func].clone()));
            }
            Record::Exit { .. } => depth -= 1,
            _ => {}
        }
    }
    assert_eq!(depth, 0);
    assert_eq!(
        entries,
        [
            (1, "sess::outer".to_string()),
            (2, "sess::outer".to_string()),
            (3, "sess::outer".to_string()),
        ]
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn no_output_is_an_error_not_a_session() {
    assert!(matches!(
        session::start(&Config::default()),
        Err(StartError::NoOutput)
    ));
}
