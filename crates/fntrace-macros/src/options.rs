//! The options of `#[instrument_fn(...)]`: what one attribute says
//! ([`Attr`], parsed from its tokens with errors at the offending token)
//! and what applies to a function once inherited settings are resolved
//! ([`Policy`]). Pure parsing; code generation is in `lib.rs`.

use proc_macro2::{Delimiter, Span, TokenStream as TokenStream2, TokenTree};
use quote::ToTokens;
use syn::{Error, LitStr};

/// Errors collected while walking a container, so that all are reported.
#[derive(Default)]
pub(crate) struct Errors(pub(crate) Option<Error>);

impl Errors {
    pub(crate) fn push(&mut self, e: Error) {
        match &mut self.0 {
            Some(all) => all.combine(e),
            None => self.0 = Some(e),
        }
    }
}

#[derive(Clone, Copy, PartialEq, Debug)]
pub(crate) enum Sw {
    On,
    Off,
}

/// The frameworks, in the order of [`Policy::fw`].
pub(crate) const FRAMEWORKS: [&str; 4] = ["source", "mcount", "fentry", "xray"];
pub(crate) const SOURCE: usize = 0;
pub(crate) const XRAY: usize = 3;

/// What applies to one function: the resolved attribute.
#[derive(Clone, Copy, PartialEq, Debug)]
pub(crate) struct Policy {
    /// Per framework (see [`FRAMEWORKS`]).
    pub(crate) fw: [Sw; 4],
    /// Arguments to record (bit `i`: argument `i + 1`).
    pub(crate) args: u8,
    pub(crate) retval: bool,
    /// Keep only calls at least this long (ns; 0: all).
    pub(crate) threshold_ns: u64,
}

impl Policy {
    pub(crate) const ON: Policy = Policy {
        fw: [Sw::On; 4],
        args: 0,
        retval: false,
        threshold_ns: 0,
    };

    pub(crate) fn source(&self) -> bool {
        self.fw[SOURCE] == Sw::On
    }
}

/// One `#[instrument_fn(...)]` as written: changes to the inherited policy.
#[derive(Clone, Default)]
pub(crate) struct Attr {
    pub(crate) fw: [Option<Sw>; 4],
    pub(crate) args: Option<u8>,
    pub(crate) retval: Option<bool>,
    pub(crate) threshold_ns: Option<u64>,
    /// The first option that needs the function's address in the binary
    /// (a compiler framework, `args`, `retval`, `threshold`): an error on a
    /// function that cannot be registered.
    pub(crate) needs_address: Option<Span>,
}

impl Attr {
    pub(crate) fn all(sw: Sw) -> Attr {
        Attr {
            fw: [Some(sw); 4],
            ..Attr::default()
        }
    }

    pub(crate) fn apply(&self, base: Policy) -> Policy {
        let mut p = base;
        for (i, f) in self.fw.iter().enumerate() {
            if let Some(f) = f {
                p.fw[i] = *f;
            }
        }
        if let Some(a) = self.args {
            p.args = a;
        }
        if let Some(r) = self.retval {
            p.retval = r;
        }
        if let Some(t) = self.threshold_ns {
            p.threshold_ns = t;
        }
        p
    }
}

pub(crate) const KEYS: &str = "on, off, source, mcount, fentry, xray, args, retval, threshold";

/// Parses the attribute's arguments: nothing, `on`/`off`, `"on"`/`"off"`,
/// or a list of options (`mcount = "off", xray = "on", args = "1,2",
/// retval, threshold = "10us"`).
pub(crate) fn parse_attr(tokens: &TokenStream2) -> syn::Result<Attr> {
    let mut it = tokens.clone().into_iter();
    match (it.next(), it.next()) {
        (None, _) => return Ok(Attr::all(Sw::On)),
        // A value passed through a `macro_rules!` fragment.
        (Some(TokenTree::Group(g)), None) if g.delimiter() == Delimiter::None => {
            return parse_attr(&g.stream());
        }
        (Some(TokenTree::Literal(_)), None) => return parse_value(tokens).map(Attr::all),
        _ => {}
    }
    let mut attr = Attr::default();
    let mut seen: Vec<String> = vec![];
    let mut errs = Errors::default();
    for seg in split_commas(tokens) {
        if let Err(e) = parse_option(&seg, &mut attr, &mut seen) {
            errs.push(e);
        }
    }
    match errs.0 {
        Some(e) => Err(e),
        None => Ok(attr),
    }
}

/// Splits at top-level commas (empty pieces, as after a trailing comma,
/// are dropped).
pub(crate) fn split_commas(tokens: &TokenStream2) -> Vec<Vec<TokenTree>> {
    let mut out = vec![vec![]];
    for tt in tokens.clone() {
        match &tt {
            TokenTree::Punct(p) if p.as_char() == ',' => out.push(vec![]),
            _ => out.last_mut().unwrap().push(tt),
        }
    }
    out.retain(|s| !s.is_empty());
    out
}

/// One option of the list form.
pub(crate) fn parse_option(
    seg: &[TokenTree],
    attr: &mut Attr,
    seen: &mut Vec<String>,
) -> syn::Result<()> {
    let seg: Vec<TokenTree> = match seg {
        [TokenTree::Group(g)] if g.delimiter() == Delimiter::None => {
            g.stream().into_iter().collect()
        }
        _ => seg.to_vec(),
    };
    let key = match &seg[0] {
        TokenTree::Ident(i) => i.clone(),
        other => {
            return Err(Error::new_spanned(
                other,
                format!("expected an option of #[instrument_fn] ({KEYS}), found `{other}`"),
            ));
        }
    };
    let name = key.to_string();
    let value: Option<&[TokenTree]> = match seg.get(1) {
        None => None,
        Some(TokenTree::Punct(p)) if p.as_char() == '=' => {
            if seg.len() < 3 {
                return Err(Error::new_spanned(
                    p,
                    format!("expected a value after `{name} =`"),
                ));
            }
            Some(&seg[2..])
        }
        Some(other) => {
            return Err(Error::new_spanned(
                other,
                format!("expected `,` or `=` after `{name}`, found `{other}`"),
            ));
        }
    };
    let canonical = if name == "patchable" {
        "fentry"
    } else {
        name.as_str()
    };
    let group = if canonical == "on" || canonical == "off" {
        "on/off"
    } else {
        canonical
    };
    if seen.iter().any(|s| s == group) {
        let msg = if group == "on/off" {
            "give `on` or `off` once, first, then framework options".to_string()
        } else {
            format!("`{name}` is given more than once in this #[instrument_fn]")
        };
        return Err(Error::new_spanned(&key, msg));
    }
    let value_tokens = |v: &[TokenTree]| v.iter().cloned().collect::<TokenStream2>();
    match canonical {
        "on" | "off" => {
            if let Some(v) = value {
                return Err(Error::new_spanned(
                    value_tokens(v),
                    format!("`{name}` takes no value"),
                ));
            }
            let sw = if name == "on" { Sw::On } else { Sw::Off };
            // `on`/`off` first, framework options after it refine it.
            if attr.fw.iter().any(Option::is_some) {
                return Err(Error::new_spanned(
                    &key,
                    format!("`{name}` must come before the framework options"),
                ));
            }
            attr.fw = [Some(sw); 4];
        }
        "source" | "mcount" | "fentry" | "xray" => {
            let Some(v) = value else {
                return Err(Error::new_spanned(
                    &key,
                    format!("expected `{name} = \"on\"` or `{name} = \"off\"`"),
                ));
            };
            let i = FRAMEWORKS.iter().position(|f| *f == canonical).unwrap();
            attr.fw[i] = Some(parse_switch(&name, &value_tokens(v))?);
            if i != SOURCE {
                attr.needs_address.get_or_insert(key.span());
            }
        }
        "retval" => {
            let on = match value {
                None => true,
                Some(v) => parse_switch(&name, &value_tokens(v))? == Sw::On,
            };
            attr.retval = Some(on);
            attr.needs_address.get_or_insert(key.span());
        }
        "args" => {
            let Some(v) = value else {
                return Err(Error::new_spanned(
                    &key,
                    "expected `args = \"1,2\"` (argument numbers 1 to 6)",
                ));
            };
            attr.args = Some(parse_args(&value_tokens(v))?);
            attr.needs_address.get_or_insert(key.span());
        }
        "threshold" => {
            let Some(v) = value else {
                return Err(Error::new_spanned(&key, "expected `threshold = \"10us\"`"));
            };
            attr.threshold_ns = Some(parse_threshold(&value_tokens(v))?);
            attr.needs_address.get_or_insert(key.span());
        }
        _ => {
            return Err(Error::new_spanned(
                &key,
                format!(
                    "unknown #[instrument_fn] option or framework `{name}` (expected one of {KEYS})"
                ),
            ));
        }
    }
    seen.push(group.to_string());
    Ok(())
}

/// The text of a value: a string literal or a bare word.
pub(crate) fn value_text(tokens: &TokenStream2) -> Option<String> {
    let mut it = tokens.clone().into_iter();
    match (it.next(), it.next()) {
        (Some(TokenTree::Ident(i)), None) => Some(i.to_string()),
        (Some(TokenTree::Literal(l)), None) => syn::parse2::<LitStr>(l.into_token_stream())
            .ok()
            .map(|s| s.value()),
        (Some(TokenTree::Group(g)), None) if g.delimiter() == Delimiter::None => {
            value_text(&g.stream())
        }
        _ => None,
    }
}

pub(crate) fn parse_switch(key: &str, tokens: &TokenStream2) -> syn::Result<Sw> {
    match value_text(tokens).as_deref() {
        Some("on") => Ok(Sw::On),
        Some("off") => Ok(Sw::Off),
        _ => Err(Error::new_spanned(
            tokens,
            format!("expected \"on\" or \"off\" as the value of `{key}`, found `{tokens}`"),
        )),
    }
}

/// `"1,2"`: argument numbers 1 to 6 (the System V integer argument
/// registers), as a bit set.
pub(crate) fn parse_args(tokens: &TokenStream2) -> syn::Result<u8> {
    let bad = |why: &str| {
        Error::new_spanned(
            tokens,
            format!("bad `args` value `{tokens}`: {why} (e.g. args = \"1,2\")"),
        )
    };
    let text = value_text(tokens).ok_or_else(|| bad("expected a string"))?;
    let mut mask = 0u8;
    for part in text.split(',') {
        let part = part.trim().strip_prefix("arg").unwrap_or(part.trim());
        let n: u8 = part
            .parse()
            .map_err(|_| bad("argument numbers are 1 to 6, separated by commas"))?;
        if !(1..=6).contains(&n) {
            return Err(bad(
                "argument numbers are 1 to 6 (the integer argument registers)",
            ));
        }
        if mask & (1 << (n - 1)) != 0 {
            return Err(bad(&format!("argument {n} is listed twice")));
        }
        mask |= 1 << (n - 1);
    }
    Ok(mask)
}

/// `"10us"`: a duration with a unit (ns, us, ms, s), more than zero.
pub(crate) fn parse_threshold(tokens: &TokenStream2) -> syn::Result<u64> {
    let bad = || {
        Error::new_spanned(
            tokens,
            format!(
                "bad `threshold` value `{tokens}`: expected a duration above zero with a unit (ns, us, ms, s), e.g. threshold = \"10us\""
            ),
        )
    };
    let text = value_text(tokens).ok_or_else(bad)?;
    let t = text.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .ok_or_else(bad)?;
    let (num, unit) = t.split_at(split);
    let scale: f64 = match unit.trim() {
        "ns" => 1.0,
        "us" | "µs" => 1e3,
        "ms" => 1e6,
        "s" => 1e9,
        _ => return Err(bad()),
    };
    let v: f64 = num.parse().map_err(|_| bad())?;
    let ns = (v * scale).round();
    if !(1.0..1.8e19).contains(&ns) {
        return Err(bad());
    }
    Ok(ns as u64)
}

/// Parses a plain value: `on`/`off` or `"on"`/`"off"`.
pub(crate) fn parse_value(tokens: &TokenStream2) -> syn::Result<Sw> {
    match value_text(tokens).as_deref() {
        Some("on") => Ok(Sw::On),
        Some("off") => Ok(Sw::Off),
        _ => Err(Error::new_spanned(
            tokens,
            format!("expected `on` or `off` as the value of #[instrument_fn], found `{tokens}`"),
        )),
    }
}
