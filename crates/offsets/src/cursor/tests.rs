//! The cursor's reads: values, short input at every read kind, varint
//! overflow, zigzag, and the byte offsets errors name.

use super::*;
use proptest::prelude::*;

fn short(at: usize, needed: usize, remaining: usize) -> CursorError {
    CursorError::Short { at, needed, remaining }
}

#[test]
fn fixed_size_reads_are_big_endian() {
    let bytes = [0x80, 0x01, 0x02, 0xff, 0xfe, 0, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xfe, 0, 0, 0, 0, 0, 0, 0, 7];
    let mut c = Cursor::new(&bytes);
    assert_eq!(c.i8(), Ok(-128));
    assert_eq!(c.u8(), Ok(1));
    assert_eq!(c.u16(), Ok(0x02ff));
    assert_eq!(c.i16(), Ok(-512));
    assert_eq!(c.u32(), Ok(1));
    assert_eq!(c.i32(), Ok(-2));
    assert_eq!(c.position(), 14);
    assert_eq!(c.i64(), Ok(7));
    assert!(c.is_empty());
    let mut c = Cursor::new(&[0xff; 8]);
    assert_eq!(c.clone().u64(), Ok(u64::MAX));
    assert_eq!(c.array::<3>(), Ok([0xff; 3]));
    assert_eq!((c.position(), c.remaining(), c.rest()), (3, 5, &[0xff; 5][..]));
}

#[test]
fn every_read_kind_fails_short_where_it_ran_out_and_does_not_move() {
    type Read = fn(&mut Cursor<'_>) -> Result<()>;
    let reads: [(&str, usize, Read); 13] = [
        ("u8", 1, |c| c.u8().map(drop)),
        ("i8", 1, |c| c.i8().map(drop)),
        ("u16", 2, |c| c.u16().map(drop)),
        ("i16", 2, |c| c.i16().map(drop)),
        ("u32", 4, |c| c.u32().map(drop)),
        ("i32", 4, |c| c.i32().map(drop)),
        ("u64", 8, |c| c.u64().map(drop)),
        ("i64", 8, |c| c.i64().map(drop)),
        ("array", 5, |c| c.array::<5>().map(drop)),
        ("take", 6, |c| c.take(6).map(drop)),
        ("skip", 6, |c| c.skip(6)),
        ("take_range", 6, |c| c.take_range(6).map(drop)),
        ("split", 6, |c| c.split(6).map(drop)),
    ];
    let bytes = [9u8; 10];
    for (name, size, read) in reads {
        for left in 0..size {
            let mut c = Cursor::resume(&bytes, 10 - left);
            assert_eq!(read(&mut c), Err(short(10 - left, size, left)), "{name} with {left} left");
            assert_eq!(c.position(), 10 - left, "{name} does not move");
        }
        let mut c = Cursor::resume(&bytes, 10 - size);
        assert_eq!(read(&mut c), Ok(()), "{name} with enough");
        assert!(c.is_empty(), "{name} moves past what it read");
    }
}

#[test]
fn unsigned_varints_read_up_to_their_width() {
    let read = |bytes: &[u8]| Cursor::new(bytes).uvarint();
    assert_eq!(read(&[0]), Ok(0));
    assert_eq!(read(&[0x7f]), Ok(127));
    assert_eq!(read(&[0x80, 0x01]), Ok(128));
    assert_eq!(read(&[0xff, 0xff, 0xff, 0xff, 0x0f]), Ok(u32::MAX));
    assert_eq!(read(&[0xff, 0xff, 0xff, 0xff, 0x10]), Err(CursorError::VarintOverflow { at: 0, bits: 32 }));
    assert_eq!(read(&[0x80, 0x80, 0x80, 0x80, 0x80, 0]), Err(CursorError::VarintOverflow { at: 0, bits: 32 }));
    let long = |bytes: &[u8]| Cursor::new(bytes).uvarlong();
    assert_eq!(long(&[0xff, 0xff, 0xff, 0xff, 0x10]), Ok(1 << 32 | 0x0fff_ffff));
    assert_eq!(long(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]), Ok(u64::MAX));
    let over = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02];
    assert_eq!(long(&over), Err(CursorError::VarintOverflow { at: 0, bits: 64 }));
    // Cut: the error names the missing byte, needing one.
    let mut c = Cursor::new(&[1, 0x80, 0x80]);
    assert_eq!(c.u8(), Ok(1));
    assert_eq!(c.uvarint(), Err(short(3, 1, 0)));
    assert_eq!(Cursor::new(&[]).varlong(), Err(short(0, 1, 0)));
    // Overflow names where the varint starts, and leaves the cursor there.
    let mut c = Cursor::new(&[7, 0xff, 0xff, 0xff, 0xff, 0xff]);
    c.skip(1).expect("one byte");
    assert_eq!(c.uvarint(), Err(CursorError::VarintOverflow { at: 1, bits: 32 }));
    assert_eq!(c.position(), 1);
}

#[test]
fn zigzag_maps_small_magnitudes_to_short_encodings() {
    for (bytes, value) in [(&[0u8][..], 0i64), (&[1], -1), (&[2], 1), (&[3], -2), (&[0x7f], -64), (&[0x80, 0x01], 64)] {
        assert_eq!(Cursor::new(bytes).varlong(), Ok(value), "{bytes:?}");
        assert_eq!(Cursor::new(bytes).varint(), Ok(value as i32), "{bytes:?}");
    }
    assert_eq!(Cursor::new(&[0xfe, 0xff, 0xff, 0xff, 0x0f]).varint(), Ok(i32::MAX));
    assert_eq!(Cursor::new(&[0xff, 0xff, 0xff, 0xff, 0x0f]).varint(), Ok(i32::MIN));
    let max = [0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01];
    assert_eq!(Cursor::new(&max).varlong(), Ok(i64::MAX));
    let min = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01];
    assert_eq!(Cursor::new(&min).varlong(), Ok(i64::MIN));
}

#[test]
fn length_prefixed_reads() {
    assert_eq!(Cursor::new(&[0, 2, b'h', b'i']).str16(), Ok(Some("hi")));
    assert_eq!(Cursor::new(&[0xff, 0xff]).str16(), Ok(None));
    assert_eq!(Cursor::new(&[0xff, 0xfe]).str16(), Err(CursorError::InvalidLength { at: 0, len: -2 }));
    assert_eq!(Cursor::new(&[0, 3, b'h', b'i']).str16(), Err(short(2, 3, 2)), "short after the prefix");
    assert_eq!(Cursor::new(&[0, 1, 0xc0]).str16(), Err(CursorError::InvalidUtf8 { at: 2 }));
    assert_eq!(Cursor::new(&[0, 1, 9]).bytes16(), Ok(Some(&[9u8][..])));
    assert_eq!(Cursor::new(&[0, 0, 0, 1, 9]).bytes32(), Ok(Some(&[9u8][..])));
    assert_eq!(Cursor::new(&[0xff; 4]).bytes32(), Ok(None));
    assert_eq!(Cursor::new(&[0x80, 0, 0, 0]).bytes32(), Err(CursorError::InvalidLength { at: 0, len: -(1 << 31) }));
    assert_eq!(Cursor::new(&[0, 0, 0, 9, 1]).bytes32(), Err(short(4, 9, 1)));
    assert_eq!(Cursor::new(&[3, b'h', b'i']).compact_str(), Ok(Some("hi")));
    assert_eq!(Cursor::new(&[0]).compact_str(), Ok(None));
    assert_eq!(Cursor::new(&[1]).compact_bytes(), Ok(Some(&[][..])));
    assert_eq!(Cursor::new(&[0x80]).compact_bytes(), Err(short(1, 1, 0)), "a cut prefix");
    assert_eq!(Cursor::new(&[0, 0, 0, 2]).length32(), Ok(Some(2)), "a length alone is not checked");
    let c = Cursor::new(&[0; 7]);
    assert_eq!(
        (c.fits(3, 2), c.fits(2, 4), c.fits(usize::MAX, 2)),
        (Ok(3), Err(short(0, 8, 7)), Err(short(0, usize::MAX, 7)))
    );
}

#[test]
fn a_split_reads_its_own_bytes_and_names_the_whole_buffers_offsets() {
    let bytes = [1, 2, 3, 4, 5, 6];
    let mut c = Cursor::new(&bytes);
    c.skip(1).expect("one");
    let mut inner = c.split(3).expect("three");
    assert_eq!(c.position(), 4);
    assert_eq!((inner.position(), inner.remaining()), (1, 3));
    assert_eq!(inner.u16(), Ok(0x0203));
    assert_eq!(inner.u16(), Err(short(3, 2, 1)));
    assert_eq!(c.take_range(2), Ok(4..6));
    assert_eq!(Cursor::resume(&bytes, 99).remaining(), 0, "resumed past the end: at the end");
}

proptest! {
    #[test]
    fn unsigned_varints_round_trip(v in any::<u64>()) {
        let mut bytes = Vec::new();
        let mut rest = v;
        while rest >= 0x80 {
            bytes.push((rest as u8) | 0x80);
            rest >>= 7;
        }
        bytes.push(rest as u8);
        let mut c = Cursor::new(&bytes);
        prop_assert_eq!(c.uvarlong(), Ok(v));
        prop_assert!(c.is_empty());
        let narrow = Cursor::new(&bytes).uvarint();
        match u32::try_from(v) {
            Ok(v32) => prop_assert_eq!(narrow, Ok(v32)),
            Err(_) => prop_assert_eq!(narrow, Err(CursorError::VarintOverflow { at: 0, bits: 32 })),
        }
        let zigzag = ((v >> 1) as i64) ^ -((v & 1) as i64);
        prop_assert_eq!(Cursor::new(&bytes).varlong(), Ok(zigzag));
    }

    #[test]
    fn no_read_panics_or_leaves_the_buffer(bytes in proptest::collection::vec(any::<u8>(), 0..40), ops in proptest::collection::vec(0u8..12, 0..20)) {
        let mut c = Cursor::new(&bytes);
        for op in ops {
            let before = c.position();
            let result = match op {
                0 => c.u8().map(drop),
                1 => c.i16().map(drop),
                2 => c.i32().map(drop),
                3 => c.i64().map(drop),
                4 => c.uvarint().map(drop),
                5 => c.varlong().map(drop),
                6 => c.str16().map(drop),
                7 => c.bytes32().map(drop),
                8 => c.compact_str().map(drop),
                9 => c.compact_bytes().map(drop),
                10 => c.take(usize::from(op)).map(drop),
                _ => c.split(3).map(drop),
            };
            if let Err(e) = result {
                prop_assert!(e.at() <= bytes.len());
                prop_assert!(c.position() >= before);
            }
            prop_assert!(c.position() <= bytes.len());
        }
    }
}
