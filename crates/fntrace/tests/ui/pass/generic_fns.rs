//! Generic functions: where clauses, lifetimes, const generics, several
//! instantiations of one instrumented function.
#![deny(warnings)]

#[path = "../support.rs"]
mod support;

use std::fmt::Debug;
use std::ops::Add;

#[fntrace::instrument_fn]
fn sum_all<T>(items: &[T]) -> T
where
    T: Copy + Default + Add<Output = T>,
{
    items.iter().copied().fold(T::default(), |a, b| a + b)
}

#[fntrace::instrument_fn]
fn longest<'a, 'b: 'a>(a: &'a str, b: &'b str) -> &'a str {
    if b.len() > a.len() { b } else { a }
}

#[fntrace::instrument_fn]
fn first_n<const N: usize, T: Copy + Default>(v: &[T]) -> [T; N] {
    let mut out = [T::default(); N];
    for (o, i) in out.iter_mut().zip(v) {
        *o = *i;
    }
    out
}

#[fntrace::instrument_fn]
fn describe<T: Debug + ?Sized>(x: &T) -> String {
    format!("<{x:?}>")
}

#[fntrace::instrument_fn]
fn apply<F>(f: F, x: u8) -> u8
where
    F: FnOnce(u8) -> u8,
{
    f(x)
}

#[fntrace::instrument_fn]
mod in_mod {
    pub struct Wrapper<'a, T, const N: usize> {
        pub items: &'a [T; N],
    }

    impl<'a, T: Clone, const N: usize> Wrapper<'a, T, N> {
        pub fn last(&self) -> Option<T> {
            self.items.last().cloned()
        }

        pub fn len() -> usize {
            N
        }
    }

    pub fn pick<'a, T>(xs: &'a [T], i: usize) -> Option<&'a T> {
        xs.get(i)
    }
}

fn main() {
    assert_eq!(support::traced(|| sum_all(&[1u32, 2, 3])), 6);
    assert_eq!(sum_all(&[1.5f64, 2.5]), 4.0);
    assert_eq!(sum_all::<i8>(&[]), 0);
    let owned = String::from("longer");
    assert_eq!(support::traced(|| longest("ab", &owned)), "longer");
    assert_eq!(first_n::<2, u8>(&[7, 8, 9]), [7, 8]);
    assert_eq!(first_n::<4, u8>(&[7]), [7, 0, 0, 0]);
    assert_eq!(describe("s"), "<\"s\">");
    assert_eq!(describe(&[1, 2][..]), "<[1, 2]>");
    assert_eq!(apply(|x| x * 2, 21), 42);
    let k = 3;
    assert_eq!(apply(move |x| x + k, 1), 4);

    let arr = [1, 2, 3];
    let w = in_mod::Wrapper { items: &arr };
    assert_eq!(support::traced(|| w.last()), Some(3));
    assert_eq!(in_mod::Wrapper::<u8, 5>::len(), 5);
    assert_eq!(in_mod::pick(&arr, 1), Some(&2));
    assert_eq!(in_mod::pick(&arr, 9), None);
}
