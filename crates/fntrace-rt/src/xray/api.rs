//! compiler-rt's XRay C API (`<xray/xray_interface.h>`), so programs
//! written against it link against fntrace instead: handlers, patching of
//! everything or of one function, id → address.

use core::sync::atomic::Ordering;

use super::patch::{self, status};
use super::tramp::{HANDLER, HANDLER_ARG1, Handler, HandlerArg1, USER};
use crate::config::PatternError;
use crate::patch::PatchError;

/// `int __xray_set_handler(void (*entry)(int32_t, XRayEntryType))`.
#[unsafe(no_mangle)]
pub extern "C" fn __xray_set_handler(entry: Option<Handler>) -> i32 {
    HANDLER.store(
        entry.map_or(core::ptr::null_mut(), |f| f as *mut ()),
        Ordering::Release,
    );
    update_user();
    1
}

fn update_user() {
    let any = !HANDLER.load(Ordering::Acquire).is_null()
        || !HANDLER_ARG1.load(Ordering::Acquire).is_null();
    USER.store(any, Ordering::Release);
}

/// `int __xray_remove_handler(void)`.
#[unsafe(no_mangle)]
pub extern "C" fn __xray_remove_handler() -> i32 {
    __xray_set_handler(None)
}

/// `int __xray_set_handler_arg1(void (*)(int32_t, XRayEntryType, uint64_t))`.
#[unsafe(no_mangle)]
pub extern "C" fn __xray_set_handler_arg1(entry: Option<HandlerArg1>) -> i32 {
    HANDLER_ARG1.store(
        entry.map_or(core::ptr::null_mut(), |f| f as *mut ()),
        Ordering::Release,
    );
    update_user();
    1
}

/// `int __xray_remove_handler_arg1(void)`.
#[unsafe(no_mangle)]
pub extern "C" fn __xray_remove_handler_arg1() -> i32 {
    __xray_set_handler_arg1(None)
}

fn result(r: Result<usize, i32>) -> i32 {
    match r {
        Ok(_) => status::SUCCESS,
        Err(s) => s,
    }
}

/// `XRayPatchingStatus __xray_patch(void)`: patches every sled.
#[unsafe(no_mangle)]
pub extern "C" fn __xray_patch() -> i32 {
    result(patch::patch_where(true, &|_| true))
}

/// `XRayPatchingStatus __xray_unpatch(void)`.
#[unsafe(no_mangle)]
pub extern "C" fn __xray_unpatch() -> i32 {
    result(patch::patch_where(false, &|_| true))
}

/// `XRayPatchingStatus __xray_patch_function(int32_t FuncId)`.
#[unsafe(no_mangle)]
pub extern "C" fn __xray_patch_function(id: i32) -> i32 {
    patch::scan();
    patch::patch_function(id, true)
}

/// `XRayPatchingStatus __xray_unpatch_function(int32_t FuncId)`.
#[unsafe(no_mangle)]
pub extern "C" fn __xray_unpatch_function(id: i32) -> i32 {
    patch::scan();
    patch::patch_function(id, false)
}

/// `uintptr_t __xray_function_address(int32_t FuncId)`: 0 if unknown.
#[unsafe(no_mangle)]
pub extern "C" fn __xray_function_address(id: i32) -> usize {
    patch::scan();
    patch::function_address(id) as usize
}

/// `size_t __xray_max_function_id(void)` (of the main executable).
#[unsafe(no_mangle)]
pub extern "C" fn __xray_max_function_id() -> usize {
    patch::max_function_id()
}

/// `void __xray_init(void)`: discovery happens on demand; kept for
/// programs that call it.
#[unsafe(no_mangle)]
pub extern "C" fn __xray_init() {
    patch::scan();
}

/// Starts recording XRay events with the fntrace recorder: finds the
/// sleds and patches them all. Returns the number of sleds patched.
/// Objects loaded later (`dlopen`) are patched when they appear. With
/// `patterns` (`-P`: regular expressions on demangled names) only
/// matching functions are patched.
pub fn start_recording(patterns: &[String]) -> usize {
    super::tramp::RECORD.store(true, Ordering::Release);
    if !patch::scan() {
        return 0;
    }
    match patch_patterns(patterns) {
        Some(sel) => patch::patch_where(true, &|s| sel.contains(&s.func)).unwrap_or(0),
        None => patch::patch_where(true, &|_| true).unwrap_or(0),
    }
}

/// Stops recording XRay events: every sled is unpatched (a detached
/// recording). Returns how many sleds were unpatched.
pub fn stop_recording() -> usize {
    super::tramp::RECORD.store(false, Ordering::Release);
    if !patch::scan() {
        return 0;
    }
    patch::patch_where(false, &|_| true).unwrap_or(0)
}

/// Patches (`on`) or unpatches the XRay functions whose demangled name
/// matches `pattern`; returns how many functions were selected (0 when the
/// process has no sleds).
pub fn patch_matching(pattern: &str, on: bool) -> Result<usize, PatchError> {
    let re = regex_lite::Regex::new(pattern).map_err(|e| PatternError::new(pattern, &e))?;
    if !patch::scan() {
        return Ok(0);
    }
    let sel: std::collections::HashSet<u64> = {
        let objs = patch::OBJECTS.lock().unwrap_or_else(|e| e.into_inner());
        objs.iter()
            .filter(|o| o.alive && !o.sleds.is_empty())
            .flat_map(patch::function_names)
            .filter(|(_, n)| re.is_match(n))
            .map(|(a, _)| a)
            .collect()
    };
    if sel.is_empty() {
        return Ok(0);
    }
    match patch::patch_where(on, &|s| sel.contains(&s.func)) {
        Ok(_) | Err(status::NOT_INITIALIZED) => Ok(sel.len()),
        Err(s) => Err(PatchError::Xray(s)),
    }
}

/// Start addresses of the sled functions whose names match one of
/// `patterns` (`-P`), or `None` when there are none (patch everything).
fn patch_patterns(patterns: &[String]) -> Option<std::collections::HashSet<u64>> {
    if patterns.is_empty() {
        return None;
    }
    // The patterns were checked when the configuration was parsed.
    let res: Vec<regex_lite::Regex> = patterns
        .iter()
        .filter_map(|p| regex_lite::Regex::new(p).ok())
        .collect();
    let objs = patch::OBJECTS.lock().unwrap_or_else(|e| e.into_inner());
    let mut sel = std::collections::HashSet::new();
    for o in objs.iter().filter(|o| o.alive && !o.sleds.is_empty()) {
        let names = patch::function_names(o);
        for (addr, name) in names {
            if res.iter().any(|r| r.is_match(&name)) {
                sel.insert(addr);
            }
        }
    }
    Some(sel)
}
