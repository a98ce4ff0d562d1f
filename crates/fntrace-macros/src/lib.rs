//! `#[instrument_fn]`: source-level function instrumentation for fntrace.
#![forbid(unsafe_code)]

use proc_macro::TokenStream;
use proc_macro2::{Delimiter, Span, TokenStream as TokenStream2, TokenTree};
use quote::{ToTokens, quote, quote_spanned};
use syn::{
    Attribute, Error, ForeignItem, ImplItem, Item, LitStr, Meta, ReturnType, TraitItem,
    TraitItemFn, Type,
};

/// Instruments functions for fntrace: every call records an entry and, on
/// every way out (return, `?`, panic unwinding), an exit.
///
/// Put it on a function, a method, an `impl` block (every method), a `trait`
/// (every default method) or an inline `mod` (every function inside,
/// recursively through nested modules, impls and traits). Inside such a
/// container, `#[instrument_fn = "off"]` (or `(off)`) excludes an item and
/// `#[instrument_fn = "on"]` is the same as the bare form. Standalone, use
/// `#[instrument_fn(off)]` / `#[instrument_fn(on)]`: rustc rejects the
/// `= "…"` form on an attribute macro that is not inside an instrumented
/// container.
///
/// Names in traces: `module::path::function`; methods of `impl Type` are
/// `module::Type::method`, of `impl Trait for Type` `<module::Type as
/// Trait>::method`; a lone method with a `self` receiver uses
/// `std::any::type_name::<Self>()`. A lone associated function without a
/// receiver cannot name its type and shows as `module::function`. All
/// instances of a generic function share one name.
///
/// `async fn`: one entry and one exit per poll of the function's future, so
/// time waiting between polls is not counted and every recorded call stays
/// on one thread.
///
/// Compiler instrumentation: `on` is XRay's *always-instrument*. In a
/// `cargo fntrace --instrument=xray:instruction-threshold=N` (or
/// `ignore-loops`) build, LLVM drops the sleds of small functions; every
/// free function this attribute instruments then also gets a patchable
/// entry (`#[patchable_function_entry(prefix_nops = 8, entry_nops = 2)]`,
/// under `cfg(fntrace_always_instrument)`, which `cargo fntrace` sets), so
/// `fntrace record` records it through its patchable entry into the same
/// trace. Methods cannot carry that attribute (rustc allows it on free
/// functions only) and keep only what the threshold gives them. `off`
/// functions never get it. Other builds (`cargo build`, plain `xray`,
/// other modes) expand exactly as without it.
///
/// `const fn`s and functions without bodies inside a container are left
/// alone; turning the attribute on for one of them (directly, or explicitly
/// inside a container) is an error. On any other kind of item (a struct, a
/// const, an `extern` block or its items, `mod name;`, ...) the attribute is
/// an error, even `off`, and so is more than one `#[instrument_fn]` on an
/// item.
#[proc_macro_attribute]
pub fn instrument_fn(args: TokenStream, input: TokenStream) -> TokenStream {
    expand(args.into(), input.into()).into()
}

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    On,
    Off,
}

/// Parses the attribute's value: nothing, `on`/`off` or `"on"`/`"off"`.
fn parse_value(tokens: &TokenStream2) -> syn::Result<Mode> {
    let bad = || {
        Error::new_spanned(
            tokens,
            format!("expected `on` or `off` as the value of #[instrument_fn], found `{tokens}`"),
        )
    };
    let mut it = tokens.clone().into_iter();
    let word = match (it.next(), it.next()) {
        (None, _) => return Ok(Mode::On),
        (Some(TokenTree::Ident(i)), None) => i.to_string(),
        (Some(TokenTree::Literal(l)), None) => match syn::parse2::<LitStr>(l.into_token_stream()) {
            Ok(s) => s.value(),
            Err(_) => return Err(bad()),
        },
        // A value passed through a `macro_rules!` fragment.
        (Some(TokenTree::Group(g)), None) if g.delimiter() == Delimiter::None => {
            return parse_value(&g.stream());
        }
        _ => return Err(bad()),
    };
    match word.as_str() {
        "on" => Ok(Mode::On),
        "off" => Ok(Mode::Off),
        _ => Err(bad()),
    }
}

fn is_ours(a: &Attribute) -> bool {
    a.path()
        .segments
        .last()
        .is_some_and(|s| s.ident == "instrument_fn")
}

/// Errors collected while walking a container, so that all are reported.
#[derive(Default)]
struct Errors(Option<Error>);

impl Errors {
    fn push(&mut self, e: Error) {
        match &mut self.0 {
            Some(all) => all.combine(e),
            None => self.0 = Some(e),
        }
    }
}

/// Takes our attribute out of `attrs`, returning its mode if present (an
/// explicit mode); more than one is an error.
fn take_mode(attrs: &mut Vec<Attribute>, errs: &mut Errors) -> Option<Mode> {
    take_mode_at(attrs, errs).map(|(m, _)| m)
}

/// [`take_mode`], also returning the attribute, for errors about the item.
fn take_mode_at(attrs: &mut Vec<Attribute>, errs: &mut Errors) -> Option<(Mode, Attribute)> {
    let mut mode = None;
    let mut seen = false;
    attrs.retain(|a| {
        if !is_ours(a) {
            return true;
        }
        if seen {
            errs.push(duplicate(a));
            return false;
        }
        seen = true;
        let m = match &a.meta {
            Meta::Path(_) => Ok(Mode::On),
            Meta::List(l) => parse_value(&l.tokens),
            Meta::NameValue(nv) => parse_value(&nv.value.to_token_stream()),
        };
        match m {
            Ok(m) => mode = Some((m, a.clone())),
            Err(e) => errs.push(e),
        }
        false
    });
    mode
}

fn duplicate(a: &Attribute) -> Error {
    Error::new_spanned(a, "#[instrument_fn] is given more than once on this item")
}

/// Removes our attributes from `attrs`, reporting each: they are not
/// allowed on the item they are on (`what`).
fn reject(attrs: &mut Vec<Attribute>, what: &str, errs: &mut Errors) {
    attrs.retain(|a| {
        if is_ours(a) {
            errs.push(Error::new_spanned(a, not_applicable(what)));
            false
        } else {
            true
        }
    });
}

fn not_applicable(what: &str) -> String {
    format!(
        "#[instrument_fn] applies to functions, methods, impl blocks, traits and inline modules, not to {what}"
    )
}

fn const_fn_error(constness: &syn::token::Const) -> Error {
    Error::new(
        constness.span,
        "cannot instrument a const fn (remove #[instrument_fn], or `const`)",
    )
}

const NO_BODY: &str =
    "cannot instrument a function without a body (a required trait method or a foreign function)";

/// The expansion: the item (with our attributes removed, instrumented as far
/// as it could be) followed by any errors, so that one mistake does not
/// cause follow-on errors about a missing item.
fn expand(args: TokenStream2, input: TokenStream2) -> TokenStream2 {
    let mut errs = Errors::default();
    let mode = parse_value(&args).unwrap_or_else(|e| {
        errs.push(e);
        Mode::On
    });
    let mut item: Item = match syn::parse2(input) {
        Ok(i) => i,
        Err(e) => return e.to_compile_error(),
    };
    // Another of our attributes on the same item would expand again (or,
    // inside a container, decide the mode): either way a mistake.
    if let Some(attrs) = item_attrs(&mut item) {
        attrs.retain(|a| {
            if is_ours(a) {
                errs.push(duplicate(a));
                false
            } else {
                true
            }
        });
    }
    match &mut item {
        Item::Fn(f) => {
            if let Some(c) = &f.sig.constness {
                if mode == Mode::On {
                    errs.push(const_fn_error(c));
                }
            } else if mode == Mode::Off {
                register_off(f);
            } else if mode == Mode::On {
                always_instrument(&mut f.attrs);
                let name = f.sig.ident.to_string();
                let naming = if f.sig.receiver().is_some() {
                    Naming::SelfType(name)
                } else {
                    Naming::Path(name)
                };
                instrument_block(&mut f.block, &f.sig, naming);
            }
        }
        Item::Mod(m) if m.content.is_none() => errs.push(Error::new(
            Span::call_site(),
            format!(
                "#[instrument_fn] cannot see into `mod {};` (a module in another file): put it on the items in that file, or use an inline module (`mod {} {{ ... }}`)",
                m.ident, m.ident
            ),
        )),
        Item::Mod(_) | Item::Impl(_) | Item::Trait(_) => instrument_item(&mut item, mode, &mut errs),
        Item::Verbatim(v) if syn::parse2::<TraitItemFn>(v.clone()).is_ok() => {
            if mode == Mode::On {
                errs.push(Error::new(Span::call_site(), NO_BODY));
            }
        }
        other => errs.push(Error::new(Span::call_site(), not_applicable(kind(other)))),
    }
    let mut out = item.into_token_stream();
    if let Some(e) = errs.0 {
        out.extend(e.to_compile_error());
    }
    out
}

/// Environment variable `cargo fntrace` sets for the rustc runs that get
/// `--cfg fntrace_always_instrument` (and declare it with `--check-cfg`).
const ENV_ALWAYS: &str = "FNTRACE_ALWAYS_INSTRUMENT";

/// The cfg name that turns the patchable entry of instrumented functions
/// on.
const CFG_ALWAYS: &str = "fntrace_always_instrument";

/// Gives an instrumented free function
/// `#[cfg_attr(fntrace_always_instrument, patchable_function_entry(prefix_nops
/// = 8, entry_nops = 2))]`: XRay's *always-instrument* for `cargo fntrace
/// --instrument=xray:instruction-threshold=N` builds, where LLVM drops the
/// sleds of small functions (rustc 1.95 has no per-function XRay
/// attribute); fntrace's dynamic runtime records through the entry.
///
/// Only when `cargo fntrace` asked for it (`FNTRACE_ALWAYS_INSTRUMENT` in
/// rustc's environment, set exactly for the crates that get the cfg and
/// its `--check-cfg`): anywhere else the cfg name would be unexpected and
/// rustc's `unexpected_cfgs` lint would warn in the user's crate, so
/// ordinary builds get the same expansion as before. rustc accepts the
/// attribute on free functions only (not on methods).
fn always_instrument(attrs: &mut Vec<Attribute>) {
    if std::env::var_os(ENV_ALWAYS).is_none() {
        return;
    }
    let cfg = syn::Ident::new(CFG_ALWAYS, Span::call_site());
    attrs.push(syn::parse_quote! {
        #[cfg_attr(#cfg, patchable_function_entry(prefix_nops = 8, entry_nops = 2))]
    });
}

/// Registers a function marked `off` in the `fntrace_off` table (a
/// `#[used]` static in section `fntrace_off` holding its address), which
/// the XRay and patchable-entry runtimes read so they never patch it. Only
/// free, non-generic, non-async functions can name themselves in a static.
fn register_off(f: &mut syn::ItemFn) {
    let generic = f
        .sig
        .generics
        .params
        .iter()
        .any(|p| !matches!(p, syn::GenericParam::Lifetime(_)));
    if generic || f.sig.asyncness.is_some() || f.sig.constness.is_some() {
        return;
    }
    let name = &f.sig.ident;
    let stmt: syn::Stmt = syn::parse_quote! {
        {
            #[used]
            #[unsafe(link_section = "fntrace_off")]
            static __FNTRACE_OFF: ::fntrace::__private::OffEntry =
                ::fntrace::__private::OffEntry(#name as *const ());
        }
    };
    f.block.stmts.insert(0, stmt);
}

fn item_attrs(i: &mut Item) -> Option<&mut Vec<Attribute>> {
    Some(match i {
        Item::Const(x) => &mut x.attrs,
        Item::Enum(x) => &mut x.attrs,
        Item::ExternCrate(x) => &mut x.attrs,
        Item::Fn(x) => &mut x.attrs,
        Item::ForeignMod(x) => &mut x.attrs,
        Item::Impl(x) => &mut x.attrs,
        Item::Macro(x) => &mut x.attrs,
        Item::Mod(x) => &mut x.attrs,
        Item::Static(x) => &mut x.attrs,
        Item::Struct(x) => &mut x.attrs,
        Item::Trait(x) => &mut x.attrs,
        Item::TraitAlias(x) => &mut x.attrs,
        Item::Type(x) => &mut x.attrs,
        Item::Union(x) => &mut x.attrs,
        Item::Use(x) => &mut x.attrs,
        _ => return None,
    })
}

fn kind(i: &Item) -> &'static str {
    match i {
        Item::Struct(_) => "a struct",
        Item::Enum(_) => "an enum",
        Item::Union(_) => "a union",
        Item::Static(_) => "a static",
        Item::Const(_) => "a const",
        Item::Use(_) => "a use declaration",
        Item::Type(_) => "a type alias",
        Item::ForeignMod(_) => "an extern block",
        Item::Macro(_) => "a macro invocation or definition",
        Item::ExternCrate(_) => "an extern crate declaration",
        Item::TraitAlias(_) => "a trait alias",
        _ => "this item",
    }
}

enum Naming {
    /// `module_path!()::name`.
    Path(String),
    /// A fixed prefix after the module path, then the name.
    Prefixed(String, String),
    /// `<module::Type as Trait>::name`.
    TraitImpl(String, String, String),
    /// `type_name::<Self>()::name`.
    SelfType(String),
}

/// Instruments everything inside `item` whose effective mode is on; `mode`
/// is the mode inherited from the container. Our attributes on items
/// inside are removed (and applied); errors go to `errs`.
fn instrument_item(item: &mut Item, mode: Mode, errs: &mut Errors) {
    match item {
        Item::Fn(f) => {
            let explicit = take_mode(&mut f.attrs, errs);
            match (explicit.unwrap_or(mode), &f.sig.constness) {
                (Mode::On, Some(c)) if explicit.is_some() => errs.push(const_fn_error(c)),
                (Mode::On, None) => {
                    always_instrument(&mut f.attrs);
                    let name = f.sig.ident.to_string();
                    instrument_block(&mut f.block, &f.sig, Naming::Path(name));
                }
                (Mode::Off, None) => register_off(f),
                _ => {}
            }
        }
        Item::Mod(md) => {
            let m = take_mode(&mut md.attrs, errs).unwrap_or(mode);
            if let Some((_, items)) = &mut md.content {
                for i in items {
                    instrument_item(i, m, errs);
                }
            }
        }
        Item::Impl(im) => {
            let m = take_mode(&mut im.attrs, errs).unwrap_or(mode);
            let ty = type_name(&im.self_ty);
            let tr = im.trait_.as_ref().map(|(_, p, _)| path_name(p));
            for ii in &mut im.items {
                let f = match ii {
                    ImplItem::Fn(f) => f,
                    ImplItem::Const(c) => {
                        reject(&mut c.attrs, "an associated const", errs);
                        continue;
                    }
                    ImplItem::Type(t) => {
                        reject(&mut t.attrs, "an associated type", errs);
                        continue;
                    }
                    ImplItem::Macro(mc) => {
                        reject(&mut mc.attrs, "a macro invocation", errs);
                        continue;
                    }
                    _ => continue,
                };
                let explicit = take_mode(&mut f.attrs, errs);
                match (explicit.unwrap_or(m), &f.sig.constness) {
                    (Mode::On, Some(c)) if explicit.is_some() => errs.push(const_fn_error(c)),
                    (Mode::On, None) => {
                        let name = f.sig.ident.to_string();
                        let naming = match &tr {
                            Some(t) => Naming::TraitImpl(ty.clone(), t.clone(), name),
                            None => Naming::Prefixed(ty.clone(), name),
                        };
                        instrument_block(&mut f.block, &f.sig, naming);
                    }
                    _ => {}
                }
            }
        }
        Item::Trait(t) => {
            let m = take_mode(&mut t.attrs, errs).unwrap_or(mode);
            let tn = t.ident.to_string();
            for ti in &mut t.items {
                let f = match ti {
                    TraitItem::Fn(f) => f,
                    TraitItem::Const(c) => {
                        reject(&mut c.attrs, "an associated const", errs);
                        continue;
                    }
                    TraitItem::Type(ty) => {
                        reject(&mut ty.attrs, "an associated type", errs);
                        continue;
                    }
                    TraitItem::Macro(mc) => {
                        reject(&mut mc.attrs, "a macro invocation", errs);
                        continue;
                    }
                    _ => continue,
                };
                let explicit = take_mode_at(&mut f.attrs, errs);
                let fm = explicit.as_ref().map_or(m, |(m, _)| *m);
                match (fm, &f.sig.constness, &mut f.default) {
                    (Mode::Off, ..) => {}
                    (Mode::On, Some(c), _) if explicit.is_some() => errs.push(const_fn_error(c)),
                    (Mode::On, None, None) => {
                        if let Some((_, a)) = &explicit {
                            errs.push(Error::new_spanned(a, NO_BODY));
                        }
                    }
                    (Mode::On, None, Some(block)) => {
                        let name = f.sig.ident.to_string();
                        instrument_block(block, &f.sig, Naming::Prefixed(tn.clone(), name));
                    }
                    _ => {}
                }
            }
        }
        Item::ForeignMod(fm) => {
            reject(&mut fm.attrs, "an extern block", errs);
            for fi in &mut fm.items {
                let attrs = match fi {
                    ForeignItem::Fn(x) => &mut x.attrs,
                    ForeignItem::Static(x) => &mut x.attrs,
                    ForeignItem::Type(x) => &mut x.attrs,
                    ForeignItem::Macro(x) => &mut x.attrs,
                    _ => continue,
                };
                reject(attrs, "an item in an extern block", errs);
            }
        }
        other => {
            let what = kind(other);
            if let Some(attrs) = item_attrs(other) {
                reject(attrs, what, errs);
            }
        }
    }
}

fn path_name(p: &syn::Path) -> String {
    p.segments
        .iter()
        .map(|s| s.ident.to_string())
        .collect::<Vec<_>>()
        .join("::")
}

fn type_name(t: &Type) -> String {
    match t {
        Type::Path(p) => path_name(&p.path),
        Type::Reference(r) => format!("&{}", type_name(&r.elem)),
        other => quote!(#other).to_string().replace(' ', ""),
    }
}

fn instrument_block(block: &mut syn::Block, sig: &syn::Signature, naming: Naming) {
    let span = Span::mixed_site();
    let site = syn::Ident::new("__FNTRACE_SITE", span);
    let guard = syn::Ident::new("__fntrace_guard", span);
    let line = sig.ident.span();
    let (name_expr, self_type) = match naming {
        Naming::Path(n) => (quote!(concat!(module_path!(), "::", #n)), false),
        Naming::Prefixed(p, n) => (quote!(concat!(module_path!(), "::", #p, "::", #n)), false),
        Naming::TraitImpl(ty, tr, n) => (
            quote!(concat!("<", module_path!(), "::", #ty, " as ", #tr, ">::", #n)),
            false,
        ),
        Naming::SelfType(n) => (quote!(#n), true),
    };
    let line_expr = quote_spanned!(line=> line!());
    let static_def = quote! {
        static #site: ::fntrace::__private::Site =
            ::fntrace::__private::Site::new(#name_expr, file!(), #line_expr);
    };
    let enter = if self_type {
        quote!(::fntrace::__private::enter_method(&#site, ::core::any::type_name::<Self>))
    } else {
        quote!(::fntrace::__private::enter(&#site))
    };
    if sig.asyncness.is_some() {
        // The declared output type lets the compiler infer the type of the
        // `async` block (`impl Trait` cannot be named there: inferred).
        let ret = match &sig.output {
            ReturnType::Default => quote!(()),
            ReturnType::Type(_, t) if mentions_impl(&t.to_token_stream()) => quote!(_),
            ReturnType::Type(_, t) => quote!(#t),
        };
        let stmts = &block.stmts;
        let new: syn::Block = if self_type {
            // `instrument_future` cannot take the `Self` type's name: the
            // same, one entry and exit per poll, with `enter_method`.
            let fut = syn::Ident::new("__fntrace_future", span);
            let cx = syn::Ident::new("__fntrace_cx", span);
            syn::parse_quote!({
                #static_def
                let mut #fut = ::core::pin::pin!(async move { #(#stmts)* });
                ::core::future::poll_fn(move |#cx| -> ::core::task::Poll<#ret> {
                    let #guard = #enter;
                    ::core::future::Future::poll(::core::pin::Pin::as_mut(&mut #fut), #cx)
                })
                .await
            })
        } else {
            syn::parse_quote!({
                #static_def
                ::fntrace::__private::instrument_future::<#ret, _>(&#site, async move { #(#stmts)* }).await
            })
        };
        *block = new;
    } else {
        let stmts = std::mem::take(&mut block.stmts);
        let new: syn::Block = syn::parse_quote!({
            #static_def
            let #guard = #enter;
            #(#stmts)*
        });
        *block = new;
    }
}

/// Whether a type contains `impl Trait` (the keyword, not a name like
/// `SimpleError`).
fn mentions_impl(t: &TokenStream2) -> bool {
    t.clone().into_iter().any(|tt| match tt {
        TokenTree::Ident(i) => i == "impl",
        TokenTree::Group(g) => mentions_impl(&g.stream()),
        _ => false,
    })
}
