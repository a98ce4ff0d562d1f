//! Marker argument types and signatures: what a marker may carry, the
//! type names that probes are checked against, and the formatting of
//! argument values for recording (into a caller's buffer, no allocation).

use core::fmt::{self, Write};

/// A type a marker argument may have.
///
/// Implemented for the integers, `f32`, `f64`, `bool`, `char`, `&str` and
/// `&[u8]`. In a marker declaration (a `static`) a borrowed type is written
/// `&str`/`&[u8]` and means `&'static str`; the value a probe receives is
/// [`Arg::Val`], borrowed only for the duration of the call.
pub trait Arg: 'static {
    /// The value passed to probes (`&'a str` for `&'static str`).
    type Val<'a>: Copy;
    /// The type's name in signatures (`"u32"`, `"&str"`).
    const NAME: &'static str;
    /// Writes a value for the trace (`1500`, `"eth0"`).
    fn fmt(v: &Self::Val<'_>, out: &mut dyn Write) -> fmt::Result;
}

macro_rules! display_args {
    ($($t:ty),*) => {$(
        impl Arg for $t {
            type Val<'a> = $t;
            const NAME: &'static str = stringify!($t);
            fn fmt(v: &$t, out: &mut dyn Write) -> fmt::Result {
                write!(out, "{v}")
            }
        }
    )*};
}
display_args!(
    u8, u16, u32, u64, u128, usize, i8, i16, i32, i64, i128, isize, f32, f64, bool
);

impl Arg for char {
    type Val<'a> = char;
    const NAME: &'static str = "char";
    fn fmt(v: &char, out: &mut dyn Write) -> fmt::Result {
        write!(out, "{v:?}")
    }
}

impl Arg for &'static str {
    type Val<'a> = &'a str;
    const NAME: &'static str = "&str";
    fn fmt(v: &&str, out: &mut dyn Write) -> fmt::Result {
        write!(out, "{v:?}")
    }
}

impl Arg for &'static [u8] {
    type Val<'a> = &'a [u8];
    const NAME: &'static str = "&[u8]";
    fn fmt(v: &&[u8], out: &mut dyn Write) -> fmt::Result {
        out.write_str("0x")?;
        for b in v.iter() {
            write!(out, "{b:02x}")?;
        }
        Ok(())
    }
}

/// The argument list of a marker or a probe: a tuple of [`Arg`] types
/// (up to 8), or [`AnyArgs`] for probes that accept every marker.
pub trait Signature: 'static {
    /// The tuple of values passed at a firing.
    type Args<'a>: Copy;
    /// Argument type names, in order.
    const TYPES: &'static [&'static str];
    /// Whether probes of this signature accept any marker (no type check).
    const ANY: bool = false;
    /// Writes `name=value` pairs separated by spaces.
    fn fmt(args: &Self::Args<'_>, names: &[&str], out: &mut dyn Write) -> fmt::Result;
}

/// The signature of probes that take every marker: they receive a
/// [`crate::Event`] (name, argument types, formatting) instead of typed
/// values.
pub struct AnyArgs;

impl Signature for AnyArgs {
    type Args<'a> = ();
    const TYPES: &'static [&'static str] = &[];
    const ANY: bool = true;
    fn fmt(_: &(), _: &[&str], _: &mut dyn Write) -> fmt::Result {
        Ok(())
    }
}

macro_rules! tuple_signatures {
    ($( ( $($t:ident $v:ident $i:tt),* ) )*) => {$(
        impl<$($t: Arg),*> Signature for ($($t,)*) {
            type Args<'a> = ($($t::Val<'a>,)*);
            const TYPES: &'static [&'static str] = &[$($t::NAME),*];
            #[allow(unused_variables, unused_mut, unused_assignments)]
            fn fmt(args: &Self::Args<'_>, names: &[&str], out: &mut dyn Write) -> fmt::Result {
                let mut first = true;
                $(
                    if !first {
                        out.write_char(' ')?;
                    }
                    first = false;
                    out.write_str(names.get($i).copied().unwrap_or("?"))?;
                    out.write_char('=')?;
                    $t::fmt(&args.$i, out)?;
                )*
                Ok(())
            }
        }
    )*};
}
tuple_signatures! {
    ()
    (A a 0)
    (A a 0, B b 1)
    (A a 0, B b 1, C c 2)
    (A a 0, B b 1, C c 2, D d 3)
    (A a 0, B b 1, C c 2, D d 3, E e 4)
    (A a 0, B b 1, C c 2, D d 3, E e 4, F f 5)
    (A a 0, B b 1, C c 2, D d 3, E e 4, F f 5, G g 6)
    (A a 0, B b 1, C c 2, D d 3, E e 4, F f 5, G g 6, H h 7)
}

/// Writes a signature as `(u32, &str)`.
pub fn write_types(types: &[&str], out: &mut dyn Write) -> fmt::Result {
    out.write_char('(')?;
    for (i, t) in types.iter().enumerate() {
        if i > 0 {
            out.write_str(", ")?;
        }
        out.write_str(t)?;
    }
    out.write_char(')')
}

/// A fixed buffer that formatting writes into; text past its end is cut
/// (at a character boundary) and marked with `…`.
pub struct FmtBuf<const N: usize> {
    buf: [u8; N],
    len: usize,
    cut: bool,
}

impl<const N: usize> FmtBuf<N> {
    /// An empty buffer.
    pub const fn new() -> Self {
        FmtBuf {
            buf: [0; N],
            len: 0,
            cut: false,
        }
    }

    /// The text written so far.
    pub fn as_str(&self) -> &str {
        // Only whole characters are ever copied in.
        core::str::from_utf8(&self.buf[..self.len]).unwrap_or("")
    }

    /// Whether text was cut.
    pub fn truncated(&self) -> bool {
        self.cut
    }
}

impl<const N: usize> Default for FmtBuf<N> {
    fn default() -> Self {
        Self::new()
    }
}

impl<const N: usize> Write for FmtBuf<N> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        if self.cut {
            return Ok(());
        }
        // Keep room for the 3-byte `…`.
        let room = N.saturating_sub(self.len + 3);
        if s.len() <= room {
            self.buf[self.len..self.len + s.len()].copy_from_slice(s.as_bytes());
            self.len += s.len();
            return Ok(());
        }
        let mut end = room;
        while end > 0 && !s.is_char_boundary(end) {
            end -= 1;
        }
        self.buf[self.len..self.len + end].copy_from_slice(&s.as_bytes()[..end]);
        self.len += end;
        let ell = "…".as_bytes();
        if self.len + ell.len() <= N {
            self.buf[self.len..self.len + ell.len()].copy_from_slice(ell);
            self.len += ell.len();
        }
        self.cut = true;
        Ok(())
    }
}
