//! Traits: an instrumented trait impl block, a trait whose default method
//! bodies are instrumented, generic trait impls, and dispatch through
//! `dyn Trait`.
#![deny(warnings)]

#[path = "../support.rs"]
mod support;

use std::fmt;

#[fntrace::instrument_fn]
trait Shape {
    fn area(&self) -> f64;

    fn describe(&self) -> String {
        format!("shape of area {}", self.area())
    }

    fn double_area(&self) -> f64 {
        2.0 * self.area()
    }

    fn unit() -> u8
    where
        Self: Sized,
    {
        1
    }
}

struct Square(f64);
struct Circle(f64);

#[fntrace::instrument_fn]
impl Shape for Square {
    fn area(&self) -> f64 {
        self.0 * self.0
    }
}

impl Shape for Circle {
    fn area(&self) -> f64 {
        3.0 * self.0 * self.0
    }

    #[fntrace::instrument_fn]
    fn describe(&self) -> String {
        "circle".to_string()
    }
}

#[fntrace::instrument_fn]
impl fmt::Display for Square {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Square({})", self.0)
    }
}

struct Pair<T>(T, T);

#[fntrace::instrument_fn]
impl<T: PartialOrd + Copy> From<Pair<T>> for (T, T) {
    fn from(p: Pair<T>) -> (T, T) {
        if p.0 <= p.1 { (p.0, p.1) } else { (p.1, p.0) }
    }
}

#[fntrace::instrument_fn]
impl<T> Iterator for Pair<Option<T>> {
    type Item = T;

    fn next(&mut self) -> Option<T> {
        self.0.take().or_else(|| self.1.take())
    }
}

fn main() {
    let shapes: Vec<Box<dyn Shape>> = vec![Box::new(Square(2.0)), Box::new(Circle(1.0))];
    let areas: Vec<f64> = support::traced(|| shapes.iter().map(|s| s.area()).collect());
    assert_eq!(areas, [4.0, 3.0]);
    assert_eq!(shapes[0].describe(), "shape of area 4");
    assert_eq!(shapes[1].describe(), "circle");
    assert_eq!(shapes[1].double_area(), 6.0);
    assert_eq!(Square::unit(), 1);
    // Circle::area is not instrumented.
    assert_eq!(support::untraced(|| Circle(2.0).area()), 12.0);
    assert_eq!(support::traced(|| Square(1.5).to_string()), "Square(1.5)");
    assert_eq!(<(i32, i32)>::from(Pair(5, 3)), (3, 5));
    let (a, b): (f32, f32) = Pair(1.0, 2.0).into();
    assert_eq!((a, b), (1.0, 2.0));
    assert_eq!(Pair(Some('x'), Some('y')).collect::<String>(), "xy");
}
