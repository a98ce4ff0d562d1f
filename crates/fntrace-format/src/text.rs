//! Text from a trace or an object file made safe to show: names, thread
//! names and marker text are untrusted bytes, and a control character in
//! one would reach the user's terminal (escape sequences), break
//! line-oriented exports (a newline in a folded stack) or make XML
//! ill-formed (ESC in an SVG).

use std::borrow::Cow;

/// Whether `c` is a control character: C0 (including tab and newline),
/// DEL or C1 (U+0080..=U+009F).
fn is_control(c: char) -> bool {
    matches!(c, '\0'..='\x1f' | '\x7f'..='\u{9f}')
}

/// `s` with each control character replaced by a visible escape, `\x1b`
/// for ESC, `\x85` for NEL; borrowed (no allocation) when there is none.
pub fn sanitize(s: &str) -> Cow<'_, str> {
    if !s.chars().any(is_control) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if is_control(c) {
            out.push_str(&format!("\\x{:02x}", c as u32));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// [`sanitize`] of UTF-8 bytes (invalid sequences become U+FFFD), owned.
pub fn sanitize_bytes(b: &[u8]) -> String {
    match String::from_utf8_lossy(b) {
        Cow::Borrowed(s) => sanitize(s).into_owned(),
        Cow::Owned(s) => match sanitize(&s) {
            Cow::Borrowed(_) => s,
            Cow::Owned(t) => t,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_escaped() {
        assert!(matches!(sanitize("fib::<T>"), Cow::Borrowed(_)));
        assert_eq!(sanitize("a\x1b[2Jb"), "a\\x1b[2Jb");
        assert_eq!(sanitize("x\ny\tz\x07\x7f"), "x\\x0ay\\x09z\\x07\\x7f");
        assert_eq!(sanitize("c1\u{9b}31m é"), "c1\\x9b31m é");
        assert_eq!(sanitize_bytes(b"n\x00\xff"), "n\\x00\u{fffd}");
    }
}
