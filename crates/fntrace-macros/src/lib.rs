//! `#[instrument_fn]`: source-level function instrumentation for fntrace.
#![forbid(unsafe_code)]

use proc_macro::TokenStream;
use proc_macro2::{Span, TokenStream as TokenStream2};
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{Attribute, Error, ImplItem, Item, Meta, ReturnType, TraitItem, Type};

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
/// on one thread. `const fn`s, functions without bodies and items in
/// `extern` blocks inside a container are left alone; on a `const fn`
/// directly the attribute is an error.
#[proc_macro_attribute]
pub fn instrument_fn(args: TokenStream, input: TokenStream) -> TokenStream {
    let args = TokenStream2::from(args);
    match expand(args, input.into()) {
        Ok(t) => t.into(),
        Err(e) => e.to_compile_error().into(),
    }
}

#[derive(Clone, Copy, PartialEq)]
enum Mode {
    On,
    Off,
}

fn parse_value(tokens: &TokenStream2, span: Span) -> syn::Result<Mode> {
    let s = tokens.to_string();
    match s.trim().trim_matches('"') {
        "" | "on" => Ok(Mode::On),
        "off" => Ok(Mode::Off),
        _ => Err(Error::new(
            if tokens.is_empty() {
                span
            } else {
                tokens.span()
            },
            "expected \"on\" or \"off\"",
        )),
    }
}

fn is_ours(a: &Attribute) -> bool {
    a.path()
        .segments
        .last()
        .is_some_and(|s| s.ident == "instrument_fn")
}

/// Takes our attribute out of `attrs`, returning its mode if present.
fn take_mode(attrs: &mut Vec<Attribute>) -> syn::Result<Option<Mode>> {
    let mut mode = None;
    let mut err = None;
    attrs.retain(|a| {
        if !is_ours(a) {
            return true;
        }
        let m = match &a.meta {
            Meta::Path(_) => Ok(Mode::On),
            Meta::List(l) => parse_value(&l.tokens, l.span()),
            Meta::NameValue(nv) => {
                let v = &nv.value;
                parse_value(&quote!(#v), nv.value.span())
            }
        };
        match m {
            Ok(m) => mode = Some(m),
            Err(e) => err = Some(e),
        }
        false
    });
    match err {
        Some(e) => Err(e),
        None => Ok(mode),
    }
}

fn expand(args: TokenStream2, input: TokenStream2) -> syn::Result<TokenStream2> {
    let mode = parse_value(&args, Span::call_site())?;
    let mut item: Item = syn::parse2(input)?;
    if mode == Mode::Off {
        strip_item(&mut item)?;
        return Ok(quote!(#item));
    }
    match &mut item {
        Item::Fn(f) => {
            if f.sig.constness.is_some() {
                return Err(Error::new(
                    f.sig.constness.span(),
                    "cannot instrument a const fn",
                ));
            }
            let name = f.sig.ident.to_string();
            let naming = if f.sig.receiver().is_some() {
                Naming::SelfType(name)
            } else {
                Naming::Path(name)
            };
            instrument_block(&mut f.block, &f.sig, naming);
        }
        Item::Mod(m) => {
            if m.content.is_none() {
                return Err(Error::new(
                    m.span(),
                    "#[instrument_fn] applies to inline modules only (`mod name { ... }`)",
                ));
            }
            instrument_item(&mut item, Mode::On)?;
        }
        Item::Impl(_) | Item::Trait(_) => instrument_item(&mut item, Mode::On)?,
        other => {
            return Err(Error::new(
                Span::call_site(),
                format!(
                    "#[instrument_fn] applies to functions, methods, impl blocks, traits and inline modules, not to {}",
                    kind(other)
                ),
            ));
        }
    }
    Ok(quote!(#item))
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
        Item::Macro(_) => "a macro invocation",
        _ => "this item",
    }
}

/// Removes our attributes from everything inside an item that is off.
fn strip_item(item: &mut Item) -> syn::Result<()> {
    instrument_item(item, Mode::Off)
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
/// is the mode inherited from the container.
fn instrument_item(item: &mut Item, mode: Mode) -> syn::Result<()> {
    match item {
        Item::Fn(f) => {
            let m = take_mode(&mut f.attrs)?.unwrap_or(mode);
            if m == Mode::On && f.sig.constness.is_none() {
                let name = f.sig.ident.to_string();
                instrument_block(&mut f.block, &f.sig, Naming::Path(name));
            }
        }
        Item::Mod(md) => {
            let m = take_mode(&mut md.attrs)?.unwrap_or(mode);
            if let Some((_, items)) = &mut md.content {
                for i in items {
                    instrument_item(i, m)?;
                }
            }
        }
        Item::Impl(im) => {
            let m = take_mode(&mut im.attrs)?.unwrap_or(mode);
            let ty = type_name(&im.self_ty);
            let tr = im.trait_.as_ref().map(|(_, p, _)| path_name(p));
            for ii in &mut im.items {
                if let ImplItem::Fn(f) = ii {
                    let fm = take_mode(&mut f.attrs)?.unwrap_or(m);
                    if fm == Mode::On && f.sig.constness.is_none() {
                        let name = f.sig.ident.to_string();
                        let naming = match &tr {
                            Some(t) => Naming::TraitImpl(ty.clone(), t.clone(), name),
                            None => Naming::Prefixed(ty.clone(), name),
                        };
                        instrument_block(&mut f.block, &f.sig, naming);
                    }
                }
            }
        }
        Item::Trait(t) => {
            let m = take_mode(&mut t.attrs)?.unwrap_or(mode);
            let tn = t.ident.to_string();
            for ti in &mut t.items {
                if let TraitItem::Fn(f) = ti {
                    let fm = take_mode(&mut f.attrs)?.unwrap_or(m);
                    if let (Mode::On, Some(block), None) = (fm, &mut f.default, f.sig.constness) {
                        let name = f.sig.ident.to_string();
                        instrument_block(block, &f.sig, Naming::Prefixed(tn.clone(), name));
                    }
                }
            }
        }
        _ => {}
    }
    Ok(())
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
        let ret = match &sig.output {
            ReturnType::Default => quote!(()),
            ReturnType::Type(_, t) => {
                if quote!(#t).to_string().contains("impl") {
                    quote!(_)
                } else {
                    quote!(#t)
                }
            }
        };
        let stmts = &block.stmts;
        let new: syn::Block = syn::parse_quote!({
            #static_def
            ::fntrace::__private::instrument_future::<#ret, _>(&#site, async move { #(#stmts)* }).await
        });
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
