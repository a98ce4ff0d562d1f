//! LEB128 variable-length integers and zigzag mapping of signed values.

/// The largest number of bytes an encoded `u64` takes.
pub const MAX_VARINT_LEN: usize = 10;

/// Writes `v` as unsigned LEB128 into `out` at `*pos`, advancing `*pos`.
///
/// `out` must have at least [`MAX_VARINT_LEN`] bytes free after `*pos`.
#[inline(always)]
pub fn put_uvarint(out: &mut [u8], pos: &mut usize, mut v: u64) {
    loop {
        let byte = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out[*pos] = byte;
            *pos += 1;
            return;
        }
        out[*pos] = byte | 0x80;
        *pos += 1;
    }
}

/// Number of bytes [`put_uvarint`] writes for `v`.
#[inline]
pub fn uvarint_len(v: u64) -> usize {
    let bits = 64 - (v | 1).leading_zeros() as usize;
    bits.div_ceil(7)
}

/// Reads an unsigned LEB128 value from `buf` at `*pos`.
///
/// Returns `None` when the buffer ends inside the value or the value does not
/// fit in 64 bits; `*pos` is then unspecified.
#[inline]
pub fn get_uvarint(buf: &[u8], pos: &mut usize) -> Option<u64> {
    let mut v: u64 = 0;
    let mut shift = 0u32;
    loop {
        let byte = *buf.get(*pos)?;
        *pos += 1;
        if shift == 63 && byte > 1 {
            return None;
        }
        v |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Some(v);
        }
        shift += 7;
        if shift > 63 {
            return None;
        }
    }
}

/// Maps a signed value to an unsigned one so that small magnitudes stay small.
#[inline(always)]
pub fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

/// Inverse of [`zigzag`].
#[inline(always)]
pub fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_edges() {
        for v in [
            0u64,
            1,
            127,
            128,
            300,
            u32::MAX as u64,
            u64::MAX - 1,
            u64::MAX,
        ] {
            let mut buf = [0u8; MAX_VARINT_LEN];
            let mut pos = 0;
            put_uvarint(&mut buf, &mut pos, v);
            assert_eq!(pos, uvarint_len(v), "len of {v}");
            let mut rpos = 0;
            assert_eq!(get_uvarint(&buf, &mut rpos), Some(v));
            assert_eq!(rpos, pos);
        }
        for v in [0i64, 1, -1, 63, -64, i64::MAX, i64::MIN] {
            assert_eq!(unzigzag(zigzag(v)), v);
        }
        assert_eq!(zigzag(-1), 1);
        assert_eq!(zigzag(1), 2);
    }

    #[test]
    fn rejects_overlong_and_truncated() {
        let mut pos = 0;
        assert_eq!(get_uvarint(&[0x80, 0x80], &mut pos), None);
        let eleven = [0xffu8; 11];
        pos = 0;
        assert_eq!(get_uvarint(&eleven, &mut pos), None);
        let mut too_big = [0xffu8; 10];
        too_big[9] = 0x02;
        pos = 0;
        assert_eq!(get_uvarint(&too_big, &mut pos), None);
    }
}
