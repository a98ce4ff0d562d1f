//! Inline modules: everything inside is instrumented, recursively (nested
//! modules, impls, traits); `#[instrument_fn = "off"]` / `(off)` excludes an
//! item and everything in it, `= "on"` / `(on)` / the bare form turn it back
//! on below an excluded item. Standalone `(off)` and `(on)` work too.
#![deny(warnings)]

#[path = "../support.rs"]
mod support;

use support::{traced, untraced};

#[fntrace::instrument_fn]
mod outer {
    pub fn on() -> u8 {
        1
    }

    #[instrument_fn = "off"]
    pub fn off() -> u8 {
        2
    }

    #[instrument_fn(off)]
    pub fn off_list() -> u8 {
        3
    }

    #[instrument_fn = "on"]
    pub fn on_explicit() -> u8 {
        4
    }

    // A const fn inside a container is left alone.
    pub const fn konst() -> u8 {
        5
    }

    pub const K: u8 = konst();

    pub mod inner {
        pub fn deep() -> u8 {
            super::on() + 10
        }

        pub mod deeper {
            pub fn deepest() -> u8 {
                20
            }
        }
    }

    #[instrument_fn = "off"]
    pub mod quiet {
        pub fn a() -> u8 {
            30
        }

        #[instrument_fn = "on"]
        pub fn loud() -> u8 {
            31
        }

        #[instrument_fn]
        pub fn loud_bare() -> u8 {
            32
        }

        #[instrument_fn(on)]
        pub mod loud_mod {
            pub fn b() -> u8 {
                33
            }

            #[instrument_fn = "off"]
            pub fn c() -> u8 {
                34
            }
        }

        pub mod still_quiet {
            pub fn d() -> u8 {
                35
            }
        }
    }

    pub struct S;

    impl S {
        pub fn m(&self) -> u8 {
            40
        }

        #[instrument_fn = "off"]
        pub fn m_off(&self) -> u8 {
            41
        }
    }

    #[instrument_fn = "off"]
    impl Clone for S {
        fn clone(&self) -> S {
            S
        }
    }

    #[instrument_fn = "off"]
    pub trait T {
        fn t(&self) -> u8 {
            50
        }

        #[instrument_fn = "on"]
        fn t_on(&self) -> u8 {
            51
        }
    }

    impl T for S {}

    pub fn with_local_items() -> u8 {
        // Items inside function bodies are separate: not instrumented by
        // the container, but may carry their own attribute.
        fn local() -> u8 {
            60
        }
        #[fntrace::instrument_fn]
        fn local_on() -> u8 {
            61
        }
        local() + local_on()
    }
}

#[fntrace::instrument_fn(off)]
fn standalone_off() -> u8 {
    70
}

#[fntrace::instrument_fn(on)]
fn standalone_on() -> u8 {
    71
}

#[fntrace::instrument_fn(off)]
mod off_mod {
    pub fn x() -> u8 {
        80
    }

    #[instrument_fn]
    pub fn y() -> u8 {
        81
    }
}

fn main() {
    assert_eq!(traced(outer::on), 1);
    assert_eq!(untraced(outer::off), 2);
    assert_eq!(untraced(outer::off_list), 3);
    assert_eq!(traced(outer::on_explicit), 4);
    assert_eq!(untraced(outer::konst), 5);
    assert_eq!(outer::K, 5);
    assert_eq!(traced(outer::inner::deep), 11);
    assert_eq!(traced(outer::inner::deeper::deepest), 20);
    assert_eq!(untraced(outer::quiet::a), 30);
    assert_eq!(traced(outer::quiet::loud), 31);
    assert_eq!(traced(outer::quiet::loud_bare), 32);
    assert_eq!(traced(outer::quiet::loud_mod::b), 33);
    assert_eq!(untraced(outer::quiet::loud_mod::c), 34);
    assert_eq!(untraced(outer::quiet::still_quiet::d), 35);
    let s = outer::S;
    assert_eq!(traced(|| s.m()), 40);
    assert_eq!(untraced(|| s.m_off()), 41);
    let _s2 = untraced(|| s.clone());
    use outer::T;
    assert_eq!(untraced(|| s.t()), 50);
    assert_eq!(traced(|| s.t_on()), 51);
    assert_eq!(outer::with_local_items(), 121);
    assert_eq!(untraced(standalone_off), 70);
    assert_eq!(traced(standalone_on), 71);
    assert_eq!(untraced(off_mod::x), 80);
    assert_eq!(traced(off_mod::y), 81);
}
