//! Workload for bench/compare: `regex-work LINES` generates LINES
//! pseudo-random access-log lines (deterministic), then parses them with
//! the `regex` crate: compiling a few patterns, extracting fields with
//! named captures, counting alternations, redacting with `replace_all`
//! and splitting. Prints a checksum so nothing is optimised away.
//! `regex-work 0` only starts and exits (the start-up measurement).

use regex::Regex;
use std::fmt::Write;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn pick<'a>(&mut self, xs: &[&'a str]) -> &'a str {
        xs[(self.next() % xs.len() as u64) as usize]
    }
}

fn generate(lines: usize) -> String {
    let mut r = Rng(0x9e37_79b9_7f4a_7c15);
    let users = ["alice", "bob", "carol", "dave", "erin", "frank", "grace"];
    let verbs = ["GET", "POST", "PUT", "DELETE", "PATCH"];
    let paths = ["api/v1/items", "api/v2/users", "static/js", "login", "search"];
    let agents = ["Mozilla/5.0 (X11; Linux x86_64)", "curl/8.5.0", "Go-http-client/2.0"];
    let mut s = String::new();
    for i in 0..lines {
        let _ = writeln!(
            s,
            "2026-12-{:02}T{:02}:{:02}:{:02}Z {} user={} email={}.{}@example.{} {} /{}/{} status={} bytes={} ua=\"{}\" id={}",
            1 + r.next() % 28,
            r.next() % 24,
            r.next() % 60,
            r.next() % 60,
            r.pick(&["INFO", "WARN", "ERROR", "DEBUG"]),
            r.pick(&users),
            r.pick(&users),
            r.next() % 1000,
            r.pick(&["com", "org", "net"]),
            r.pick(&verbs),
            r.pick(&paths),
            r.next() % 100_000,
            r.pick(&["200", "201", "204", "301", "404", "500"]),
            r.next() % 1_000_000,
            r.pick(&agents),
            i
        );
    }
    s
}

fn main() {
    let lines: usize = std::env::args()
        .nth(1)
        .map(|a| a.parse().expect("LINES"))
        .unwrap_or(20_000);
    if lines == 0 {
        println!("0");
        return;
    }
    let text = generate(lines);
    let line_re = Regex::new(
        r#"^(?P<ts>\S+) (?P<level>[A-Z]+) user=(?P<user>\w+) email=(?P<email>\S+) (?P<verb>[A-Z]+) (?P<path>/\S+) status=(?P<status>\d{3}) bytes=(?P<bytes>\d+) ua="(?P<ua>[^"]*)" id=(?P<id>\d+)$"#,
    )
    .unwrap();
    let errors = Regex::new(r"(?m)^\S+ (ERROR|WARN) .*status=5\d\d").unwrap();
    let email = Regex::new(r"[\w.]+@[\w]+\.(com|org|net)").unwrap();
    let ws = Regex::new(r"[ =]+").unwrap();
    let mut sum = 0u64;
    for line in text.lines() {
        if let Some(c) = line_re.captures(line) {
            sum += c["bytes"].parse::<u64>().unwrap() + c["user"].len() as u64;
            if c["status"].starts_with('5') {
                sum += 1;
            }
        }
        sum += ws.split(line).count() as u64;
    }
    sum += errors.find_iter(&text).count() as u64;
    let redacted = email.replace_all(&text, "<email>");
    sum += redacted.len() as u64;
    // Patterns compiled per run, as a program reading a config would.
    for i in 0..(lines / 500).max(1) {
        let re = Regex::new(&format!(r"id={}\b|/item/{}$", i * 7, i)).unwrap();
        sum += re.find_iter(&text[..text.len().min(4096)]).count() as u64;
    }
    println!("{sum}");
}
