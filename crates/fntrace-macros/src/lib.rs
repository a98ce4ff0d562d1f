//! `#[instrument_fn]`: source-level function instrumentation for fntrace.
#![forbid(unsafe_code)]

use proc_macro::TokenStream;
use proc_macro2::{Span, TokenStream as TokenStream2, TokenTree};
use quote::{ToTokens, quote, quote_spanned};
use syn::{
    Attribute, Error, ForeignItem, ImplItem, Item, Meta, ReturnType, TraitItem, TraitItemFn, Type,
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
/// Options (the RFC's future possibilities), any subset, in a list:
/// `#[instrument_fn(mcount = "off", xray = "on", fentry = "off", source =
/// "on")]` sets each framework (`patchable` is `fentry`); `"off"` means the
/// framework never patches or records the function, `"on"` is XRay's
/// always-instrument and otherwise just not excluded. `on`/`off` first set
/// all four (`(off, xray = "on")`). Unnamed frameworks keep the enclosing
/// item's setting; inner items override outer ones. `args = "1,2"` and
/// `retval` capture integer arguments (1–6) and the return value without
/// `-A`/`-R` where the mechanism can (fentry, patchable entries, rewritten
/// mcount calls); `threshold = "10us"` keeps only the calls lasting at
/// least that long, with what they called (applied at record time by the
/// compiler mechanisms). The settings go into section `fntrace_policy` (read by the
/// runtimes, `fntrace functions` and `cargo fntrace`) for free functions
/// and methods of non-generic impls; on generic or `async` functions and
/// trait default methods only `source` can apply, and other options
/// written directly on them are errors. Unknown options and bad values are
/// errors at the token.
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

mod options;
use options::{Attr, Errors, Policy, Sw, XRAY, parse_attr, parse_value};

/// On or off, for one framework.
fn is_ours(a: &Attribute) -> bool {
    a.path()
        .segments
        .last()
        .is_some_and(|s| s.ident == "instrument_fn")
}

/// Takes our attribute out of `attrs`, returning it parsed if present (an
/// explicit setting) with its span; more than one is an error.
fn take_attr(attrs: &mut Vec<Attribute>, errs: &mut Errors) -> Option<(Attr, TokenStream2)> {
    let mut found = None;
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
            Meta::Path(_) => Ok(Attr::all(Sw::On)),
            Meta::List(l) => parse_attr(&l.tokens),
            Meta::NameValue(nv) => parse_value(&nv.value.to_token_stream()).map(Attr::all),
        };
        match m {
            Ok(m) => found = Some((m, a.to_token_stream())),
            Err(e) => errs.push(e),
        }
        false
    });
    found
}

/// An error at `at` (an attribute's tokens), or at the macro's call site
/// when empty (the attribute being expanded).
fn error_at(at: &TokenStream2, msg: &str) -> Error {
    if at.is_empty() {
        Error::new(Span::call_site(), msg)
    } else {
        Error::new_spanned(at, msg)
    }
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
    let attr = parse_attr(&args).unwrap_or_else(|e| {
        errs.push(e);
        Attr::all(Sw::On)
    });
    let policy = attr.apply(Policy::ON);
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
            let name = f.sig.ident.to_string();
            let (naming, addr) = if f.sig.receiver().is_some() {
                (
                    Naming::SelfType(name),
                    Err("a method outside its impl block (put the options on the impl block or on the method inside it)"),
                )
            } else {
                // Spanned at the attribute: on an associated function
                // without `self` (which cannot be told from a free one
                // here) the name does not resolve, and the error points at
                // the options.
                let id = syn::Ident::new(&f.sig.ident.to_string(), Span::call_site());
                (Naming::Path(name), Ok(quote!(#id)))
            };
            // A standalone function that keeps every default is not
            // registered (see above).
            let register = policy != Policy::ON;
            let here = TokenStream2::new();
            let explicit = Some((&attr, &here));
            let free = f.sig.receiver().is_none();
            instrument_fn_item(
                FnParts {
                    attrs: &mut f.attrs,
                    sig: &f.sig,
                    block: Some(&mut f.block),
                },
                policy,
                explicit,
                naming,
                if register { addr } else { Err("") },
                free,
                &mut errs,
            );
        }
        Item::Mod(m) if m.content.is_none() => errs.push(Error::new(
            Span::call_site(),
            format!(
                "#[instrument_fn] cannot see into `mod {};` (a module in another file): put it on the items in that file, or use an inline module (`mod {} {{ ... }}`)",
                m.ident, m.ident
            ),
        )),
        Item::Mod(_) | Item::Impl(_) | Item::Trait(_) => {
            instrument_item(&mut item, policy, &mut errs)
        }
        Item::Verbatim(v) if syn::parse2::<TraitItemFn>(v.clone()).is_ok() => {
            if policy.source() {
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

/// The parts of a function item, method or trait method.
struct FnParts<'a> {
    attrs: &'a mut Vec<Attribute>,
    sig: &'a syn::Signature,
    block: Option<&'a mut syn::Block>,
}

/// Applies `policy` to one function: the source guard, the patchable entry
/// of XRay's always-instrument, and its entry in the policy table (`addr`:
/// the expression naming the function from inside its body, or why it
/// cannot be named; `""`: not registered, without error). `explicit`: the
/// attribute on the function itself, if any (errors point at it).
fn instrument_fn_item(
    f: FnParts<'_>,
    policy: Policy,
    explicit: Option<(&Attr, &TokenStream2)>,
    naming: Naming,
    addr: Result<TokenStream2, &str>,
    free: bool,
    errs: &mut Errors,
) {
    let FnParts { attrs, sig, block } = f;
    if let Some(c) = &sig.constness {
        // A const fn is left alone; asking for it explicitly is an error.
        if let Some((a, _)) = explicit {
            if policy.source() {
                errs.push(const_fn_error(c));
            } else if let Some(s) = a.needs_address {
                errs.push(Error::new(
                    s,
                    "cannot give a const fn per-framework options (remove `const`, or the option)",
                ));
            }
        }
        return;
    }
    let Some(block) = block else {
        if let Some((_, at)) = explicit {
            if policy.source() {
                errs.push(error_at(at, NO_BODY));
            }
        }
        return;
    };
    let addr = if sig.asyncness.is_some() {
        Err("an async fn (its body runs in the future's poll function, not in the fn)")
    } else if sig
        .generics
        .params
        .iter()
        .any(|p| !matches!(p, syn::GenericParam::Lifetime(_)))
    {
        Err("a generic function (each instance has its own address)")
    } else {
        addr
    };
    let entry = free && policy.fw[XRAY] == Sw::On && always_instrument(attrs);
    let name_expr = naming.expr();
    match &addr {
        Ok(path) => register(block, path, &name_expr, policy, entry),
        Err(why) => {
            if let (Some((a, _)), false) = (explicit, why.is_empty()) {
                if let Some(s) = a.needs_address {
                    errs.push(Error::new(
                        s,
                        format!(
                            "this option needs the function's address in the binary, which {why} cannot give"
                        ),
                    ));
                }
            }
        }
    }
    if policy.source() {
        instrument_block(block, sig, naming);
    }
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
/// attribute on free functions only (not on methods). Returns whether it
/// was added.
fn always_instrument(attrs: &mut Vec<Attribute>) -> bool {
    if std::env::var_os(ENV_ALWAYS).is_none() {
        return false;
    }
    let cfg = syn::Ident::new(CFG_ALWAYS, Span::call_site());
    attrs.push(syn::parse_quote! {
        #[cfg_attr(#cfg, patchable_function_entry(prefix_nops = 8, entry_nops = 2))]
    });
    true
}

/// Policy table flag bits (`fntrace_rt::site::policy`): framework `i` of
/// [`FRAMEWORKS`] off is bit `i`.
const FLAG_ENTRY_IS_XRAY: u32 = 1 << 8;
/// Capture mask bit of the return value (bits 0-5: arguments 1-6).
const CAPTURE_RETVAL: u32 = 0x80;

/// Registers the function's policy in the `fntrace_policy` table (a
/// `#[used]` static in section `fntrace_policy` holding its address, its
/// name and the settings), which the runtimes, `fntrace functions` and
/// `cargo fntrace` read. Only functions whose path can be written inside
/// their own body can be registered (`path`).
fn register(
    block: &mut syn::Block,
    path: &TokenStream2,
    name_expr: &TokenStream2,
    p: Policy,
    entry: bool,
) {
    let mut flags = 0u32;
    for (i, f) in p.fw.iter().enumerate() {
        if *f == Sw::Off {
            flags |= 1 << i;
        }
    }
    if entry {
        flags |= FLAG_ENTRY_IS_XRAY;
    }
    let capture = u32::from(p.args) | if p.retval { CAPTURE_RETVAL } else { 0 };
    let threshold = p.threshold_ns;
    let stmt: syn::Stmt = syn::parse_quote! {
        {
            #[used]
            #[unsafe(link_section = "fntrace_policy")]
            static __FNTRACE_POLICY: ::fntrace::__private::PolicyEntry =
                ::fntrace::__private::PolicyEntry::new(
                    #path as *const (),
                    #name_expr,
                    #flags,
                    #capture,
                    #threshold,
                );
        }
    };
    block.stmts.insert(0, stmt);
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

/// Instruments everything inside `item` under `policy`, the policy
/// inherited from the container. Our attributes on items inside are
/// removed (and applied, inner ones overriding outer ones); errors go to
/// `errs`.
fn instrument_item(item: &mut Item, policy: Policy, errs: &mut Errors) {
    match item {
        Item::Fn(f) => {
            let explicit = take_attr(&mut f.attrs, errs);
            let p = explicit.as_ref().map_or(policy, |(a, _)| a.apply(policy));
            let id = f.sig.ident.clone();
            let free = f.sig.receiver().is_none();
            let naming = Naming::Path(id.to_string());
            instrument_fn_item(
                FnParts {
                    attrs: &mut f.attrs,
                    sig: &f.sig,
                    block: Some(&mut f.block),
                },
                p,
                explicit.as_ref().map(|(a, s)| (a, s)),
                naming,
                Ok(quote!(#id)),
                free,
                errs,
            );
        }
        Item::Mod(md) => {
            let p = take_attr(&mut md.attrs, errs).map_or(policy, |(a, _)| a.apply(policy));
            if let Some((_, items)) = &mut md.content {
                for i in items {
                    instrument_item(i, p, errs);
                }
            }
        }
        Item::Impl(im) => {
            let p = take_attr(&mut im.attrs, errs).map_or(policy, |(a, _)| a.apply(policy));
            let ty = type_name(&im.self_ty);
            let tr = im.trait_.as_ref().map(|(_, p, _)| path_name(p));
            // A method's path as written in its body (statics there cannot
            // use `Self` or the impl's generic parameters).
            let self_ty = &im.self_ty;
            let qualified = match &im.trait_ {
                Some((_, t, _)) => quote!(<#self_ty as #t>),
                None => quote!(<#self_ty>),
            };
            let header = {
                let mut t = self_ty.to_token_stream();
                if let Some((_, tr, _)) = &im.trait_ {
                    t.extend(tr.to_token_stream());
                }
                t
            };
            let generic_impl = !im.generics.params.is_empty() || mentions_self(&header);
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
                let explicit = take_attr(&mut f.attrs, errs);
                let fp = explicit.as_ref().map_or(p, |(a, _)| a.apply(p));
                let name = f.sig.ident.to_string();
                let naming = match &tr {
                    Some(t) => Naming::TraitImpl(ty.clone(), t.clone(), name),
                    None => Naming::Prefixed(ty.clone(), name),
                };
                let id = &f.sig.ident;
                let addr = if generic_impl {
                    Err("a method of a generic impl (each instance has its own address)")
                } else {
                    Ok(quote!(#qualified::#id))
                };
                instrument_fn_item(
                    FnParts {
                        attrs: &mut f.attrs,
                        sig: &f.sig,
                        block: Some(&mut f.block),
                    },
                    fp,
                    explicit.as_ref().map(|(a, s)| (a, s)),
                    naming,
                    addr,
                    false,
                    errs,
                );
            }
        }
        Item::Trait(t) => {
            let p = take_attr(&mut t.attrs, errs).map_or(policy, |(a, _)| a.apply(policy));
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
                let explicit = take_attr(&mut f.attrs, errs);
                let fp = explicit.as_ref().map_or(p, |(a, _)| a.apply(p));
                let name = f.sig.ident.to_string();
                instrument_fn_item(
                    FnParts {
                        attrs: &mut f.attrs,
                        sig: &f.sig,
                        block: f.default.as_mut(),
                    },
                    fp,
                    explicit.as_ref().map(|(a, s)| (a, s)),
                    Naming::Prefixed(tn.clone(), name),
                    Err("a default method of a trait (each implementing type has its own copy)"),
                    false,
                    errs,
                );
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

/// Whether tokens contain `Self` or a lifetime (an impl header written
/// with them cannot be named from a static inside a method).
fn mentions_self(t: &TokenStream2) -> bool {
    t.clone().into_iter().any(|tt| match tt {
        TokenTree::Ident(i) => i == "Self",
        TokenTree::Punct(p) => p.as_char() == '\'',
        TokenTree::Group(g) => mentions_self(&g.stream()),
        _ => false,
    })
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

impl Naming {
    /// The function's name as a `&'static str` expression (for
    /// [`Naming::SelfType`], the name alone).
    fn expr(&self) -> TokenStream2 {
        match self {
            Naming::Path(n) => quote!(concat!(module_path!(), "::", #n)),
            Naming::Prefixed(p, n) => quote!(concat!(module_path!(), "::", #p, "::", #n)),
            Naming::TraitImpl(ty, tr, n) => {
                quote!(concat!("<", module_path!(), "::", #ty, " as ", #tr, ">::", #n))
            }
            Naming::SelfType(n) => quote!(#n),
        }
    }
}

fn instrument_block(block: &mut syn::Block, sig: &syn::Signature, naming: Naming) {
    let span = Span::mixed_site();
    let site = syn::Ident::new("__FNTRACE_SITE", span);
    let guard = syn::Ident::new("__fntrace_guard", span);
    let line = sig.ident.span();
    let name_expr = naming.expr();
    let self_type = matches!(naming, Naming::SelfType(_));
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
