//! Methods: on a lone method, on an inherent impl block, receivers `self`,
//! `&self`, `&mut self`, `self: Box<Self>`, `self: Rc<Self>`, associated
//! functions and constants.
#![deny(warnings)]

#[path = "../support.rs"]
mod support;

use std::rc::Rc;

#[derive(Debug, PartialEq)]
struct Counter {
    n: u32,
}

#[fntrace::instrument_fn]
impl Counter {
    const START: u32 = 10;

    fn new() -> Self {
        Counter { n: Self::START }
    }

    fn get(&self) -> u32 {
        self.n
    }

    fn bump(&mut self, by: u32) -> &mut Self {
        self.n += by;
        self
    }

    fn into_inner(self) -> u32 {
        self.n
    }

    fn boxed(self: Box<Self>) -> u32 {
        self.n * 2
    }

    fn shared(self: Rc<Self>) -> usize {
        Rc::strong_count(&self)
    }

    fn mut_self(mut self, n: u32) -> Self {
        self.n = n;
        self
    }
}

struct Lone(u8);

impl Lone {
    #[fntrace::instrument_fn]
    fn value(&self) -> u8 {
        self.0
    }

    #[fntrace::instrument_fn]
    fn make(v: u8) -> Lone {
        Lone(v)
    }

    fn plain(&self) -> u8 {
        self.0 + 1
    }
}

fn main() {
    let mut c = support::traced(Counter::new);
    assert_eq!(c.get(), 10);
    assert_eq!(support::traced(|| c.bump(2).bump(3).get()), 15);
    assert_eq!(c.into_inner(), 15);
    assert_eq!(Box::new(Counter { n: 4 }).boxed(), 8);
    let rc = Rc::new(Counter { n: 0 });
    let keep = Rc::clone(&rc);
    assert_eq!(rc.shared(), 2);
    assert_eq!(keep.n, 0);
    assert_eq!(Counter::new().mut_self(1), Counter { n: 1 });

    let l = support::traced(|| Lone::make(4));
    assert_eq!(support::traced(|| l.value()), 4);
    assert_eq!(support::untraced(|| l.plain()), 5);
}
