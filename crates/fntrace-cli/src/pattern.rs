//! Function selectors given on the command line (`--filter NAME`,
//! `graph NAME`): a name, its last path component, or a regular
//! expression when it uses syntax names cannot contain.

/// A function selector given on the command line (`--filter NAME`,
/// `graph NAME`): matches a name equal to it, or whose last path component
/// is it, each with or without the name's parameter list (`fib` matches
/// `mycrate::work::fib` and `ns::fib(int)`; `operator()` matches
/// `main::{lambda(int)#1}::operator()(int) const`). It is a regular
/// expression, matched anywhere in the name, only when it uses syntax that
/// names do not: `^`, `$`, `\`, `|`, `.*`, `.+`, `.?` or a character class
/// (`[0-9]`); `operator+`, `{closure#0}` and `operator[]` are names.
#[derive(Debug, Clone)]
pub struct NamePattern {
    text: String,
    regex: Option<regex::Regex>,
}

/// Whether `text` uses regular-expression syntax that function names do
/// not contain (names do contain `+ * ( ) { } [] . ?` as plain
/// characters: `operator+`, `{closure#0}`, `operator[]`).
fn is_regex(text: &str) -> bool {
    text.contains(['^', '$', '\\', '|'])
        || [".*", ".+", ".?"].iter().any(|s| text.contains(s))
        || text
            .match_indices('[')
            .any(|(i, _)| !text[i + 1..].starts_with(']'))
}

/// `name` without its trailing parameter list and qualifiers
/// (`ns::f(int) const` → `ns::f`); the name itself when it has none.
fn without_params(name: &str) -> &str {
    let mut n = name.trim_end();
    for q in [" const", " volatile", " &&", " &", " noexcept"] {
        if let Some(r) = n.strip_suffix(q) {
            n = r.trim_end();
        }
    }
    if !n.ends_with(')') {
        return name;
    }
    let mut depth = 0usize;
    for (i, c) in n.char_indices().rev() {
        match c {
            ')' => depth += 1,
            '(' => {
                depth -= 1;
                if depth == 0 {
                    return if i == 0 { name } else { &n[..i] };
                }
            }
            _ => {}
        }
    }
    name
}

/// The last `::` component of `base` outside brackets (`<…>`, `(…)`,
/// `{…}`, `[…]`): `std::vector<a::b>::push_back` → `push_back`.
fn last_component(base: &str) -> &str {
    let b = base.as_bytes();
    let mut depth = 0i32;
    let mut i = b.len();
    while i > 0 {
        i -= 1;
        match b[i] {
            b'>' | b')' | b'}' | b']' => depth += 1,
            b'<' | b'(' | b'{' | b'[' => depth -= 1,
            b':' if depth == 0 && i > 0 && b[i - 1] == b':' => return &base[i + 1..],
            _ => {}
        }
    }
    base
}

impl NamePattern {
    /// The pattern as given.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// Parses a selector; a pattern with regular-expression syntax that
    /// does not compile is an error.
    pub fn new(text: &str) -> Result<NamePattern, regex::Error> {
        let regex = if is_regex(text) {
            Some(regex::Regex::new(text)?)
        } else {
            None
        };
        Ok(NamePattern {
            text: text.to_string(),
            regex,
        })
    }

    /// Whether `name` is selected.
    pub fn matches(&self, name: &str) -> bool {
        if let Some(r) = &self.regex {
            return r.is_match(name);
        }
        if name == self.text {
            return true;
        }
        let base = without_params(name);
        base == self.text || last_component(base) == self.text || last_component(name) == self.text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn name_patterns() {
        let p = NamePattern::new("fib").unwrap();
        assert!(p.matches("fib"));
        assert!(p.matches("fib_example::work::fib"));
        assert!(p.matches("fib(int)"));
        assert!(p.matches("ns::fib(int)"));
        assert!(!p.matches("fib_example::work::run"));
        let p = NamePattern::new("work::fib").unwrap();
        assert!(p.matches("work::fib"));
        assert!(!p.matches("fib_example::work::fib"));
        let p = NamePattern::new("^fib_example::.*::run$").unwrap();
        assert!(p.matches("fib_example::work::run"));
        assert!(!p.matches("fib_example::work::fib"));
        assert!(NamePattern::new("^fib(").is_err());
        let p = NamePattern::new("ns::fib(int)").unwrap();
        assert!(p.matches("ns::fib(int)"));
        // Names with characters that are regular-expression syntax.
        let p = NamePattern::new("operator+").unwrap();
        assert!(p.matches("app::geo::operator+(app::geo::V const&, app::geo::V const&)"));
        assert!(!p.matches("app::geo::operator<(app::geo::V const&, app::geo::V const&)"));
        let p = NamePattern::new("operator()").unwrap();
        assert!(p.matches("main::{lambda(int)#1}::operator()(int) const"));
        assert!(!p.matches("std::vector<int, std::allocator<int> >::operator[](unsigned long)"));
        let p = NamePattern::new("operator[]").unwrap();
        assert!(p.matches("std::vector<int, std::allocator<int> >::operator[](unsigned long)"));
        let p = NamePattern::new("rsprog::total::{closure#0}").unwrap();
        assert!(p.matches("rsprog::total::{closure#0}"));
        assert!(!p.matches("rsprog::total::{closure#1}"));
        assert!(
            NamePattern::new("{closure#0}")
                .unwrap()
                .matches("rsprog::total::{closure#0}")
        );
        let p = NamePattern::new("push_back").unwrap();
        assert!(p.matches("std::vector<a::b, std::allocator<a::b> >::push_back(a::b const&)"));
        let p = NamePattern::new("fib[0-9]").unwrap();
        assert!(p.matches("fib7") && !p.matches("fibx"));
        let p = NamePattern::new("alloc.*").unwrap();
        assert!(p.matches("my::alloc_page"));
        let p = NamePattern::new("fib(").unwrap();
        assert!(!p.matches("fib(int)"));
    }
}
