//! The metadata offset allocator: scopes, merges, cycles, errors.

use nfkit_pipeline::metadata::{assign_offsets, Access, AttrSpec, MetaNode, MetadataError};

fn node(name: &str, attrs: &[(&str, usize, Access)], next: &[usize]) -> MetaNode {
    MetaNode {
        name: name.into(),
        attrs: attrs
            .iter()
            .map(|&(n, s, a)| AttrSpec::new(n, s, a))
            .collect(),
        next: next.to_vec(),
    }
}

use Access::{Read as R, Update as U, Write as W};

fn ranges_overlap(a: (usize, usize), b: (usize, usize)) -> bool {
    a.0 < b.0 + b.1 && b.0 < a.0 + a.1
}

#[test]
fn overlapping_scopes_get_separate_bytes() {
    // w_a -> w_b -> r_a -> r_b: both values alive at w_b and r_a.
    let g = [
        node("wa", &[("a", 8, W)], &[1]),
        node("wb", &[("b", 8, W)], &[2]),
        node("ra", &[("a", 8, R)], &[3]),
        node("rb", &[("b", 8, R)], &[]),
    ];
    let o = assign_offsets(&g).unwrap();
    let a = o[0][0].offset().unwrap();
    let b = o[1][0].offset().unwrap();
    assert_eq!(o[2][0].offset(), Some(a));
    assert_eq!(o[3][0].offset(), Some(b));
    assert!(!ranges_overlap((a, 8), (b, 8)), "a@{a} b@{b}");
}

#[test]
fn disjoint_scopes_share_bytes() {
    // w_a -> r_a -> w_b -> r_b: a is dead before b is born.
    let g = [
        node("wa", &[("a", 16, W)], &[1]),
        node("ra", &[("a", 16, R)], &[2]),
        node("wb", &[("b", 16, W)], &[3]),
        node("rb", &[("b", 16, R)], &[]),
    ];
    let o = assign_offsets(&g).unwrap();
    assert_eq!(o[0][0].offset(), Some(0));
    assert_eq!(o[2][0].offset(), Some(0), "b reuses a's bytes");
}

#[test]
fn a_rewritten_attribute_starts_a_new_scope() {
    // x written twice; the second value can move, the two reads agree
    // with their own writers, and c (alive only across the first) may
    // not overlap the first x.
    let g = [
        node("w1", &[("x", 4, W), ("c", 4, W)], &[1]),
        node("r1", &[("x", 4, R), ("c", 4, R)], &[2]),
        node("w2", &[("x", 4, W)], &[3]),
        node("r2", &[("x", 4, R)], &[]),
    ];
    let o = assign_offsets(&g).unwrap();
    assert_eq!(o[0][0].offset(), o[1][0].offset());
    assert_eq!(o[2][0].offset(), o[3][0].offset());
    assert!(!ranges_overlap(
        (o[0][0].offset().unwrap(), 4),
        (o[0][1].offset().unwrap(), 4)
    ));
}

#[test]
fn branches_that_merge_agree_on_one_offset() {
    // src -> split -> {left writes t, right writes t} -> merge -> reader.
    let g = [
        node("split", &[], &[1, 2]),
        node("left", &[("t", 8, W)], &[3]),
        node("right", &[("t", 8, W), ("only_right", 8, W)], &[3]),
        node("merge", &[], &[4]),
        node("reader", &[("t", 8, R), ("only_right", 8, R)], &[]),
    ];
    let e = assign_offsets(&g);
    // only_right is read at `reader`, but the packets from `left` never
    // had it written: still, a writer reaches the reader, so it is legal
    // (the value is garbage on that path, as in BESS).
    let o = e.unwrap();
    assert_eq!(o[1][0].offset(), o[2][0].offset());
    assert_eq!(o[1][0].offset(), o[4][0].offset());
    assert!(!ranges_overlap(
        (o[4][0].offset().unwrap(), 8),
        (o[4][1].offset().unwrap(), 8)
    ));
}

#[test]
fn cycles_terminate_and_updates_carry_values_round() {
    // a -> b -> c -> a, with a writing, b updating, c reading.
    let g = [
        node("a", &[("n", 4, W)], &[1]),
        node("b", &[("n", 4, U)], &[2]),
        node("c", &[("n", 4, R)], &[0, 1]),
    ];
    let o = assign_offsets(&g).unwrap();
    assert!(o[0][0].offset().is_some());
    assert_eq!(o[0][0].offset(), o[1][0].offset());
    assert_eq!(o[1][0].offset(), o[2][0].offset());
}

#[test]
fn a_reader_in_a_cycle_without_writer_is_an_error() {
    let g = [node("a", &[], &[1]), node("b", &[("n", 4, R)], &[0])];
    let e = assign_offsets(&g).unwrap_err();
    assert_eq!(
        e,
        MetadataError::NoWriter {
            module: "b".into(),
            attr: "n".into()
        }
    );
}

#[test]
fn a_reader_without_upstream_writer_is_an_error_naming_both() {
    // The writer is downstream of the reader: no good.
    let g = [
        node("measure", &[("ts", 8, R)], &[1]),
        node("stamp", &[("ts", 8, W)], &[]),
    ];
    let e = assign_offsets(&g).unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains("`measure`") && msg.contains("`ts`") && msg.contains("no upstream writer"),
        "{msg}"
    );
}

#[test]
fn an_unread_attribute_takes_no_space() {
    let g = [node("w", &[("unused", 32, W)], &[1]), node("x", &[], &[])];
    let o = assign_offsets(&g).unwrap();
    assert_eq!(o[0][0].offset(), None);
}

#[test]
fn too_many_live_attributes_overflow_with_a_clear_error() {
    // Five 32-byte attributes alive at once need 160 bytes.
    let names = ["a", "b", "c", "d", "e"];
    let w: Vec<(&str, usize, Access)> = names.iter().map(|&n| (n, 32, W)).collect();
    let r: Vec<(&str, usize, Access)> = names.iter().map(|&n| (n, 32, R)).collect();
    let g = [node("w", &w, &[1]), node("r", &r, &[])];
    let msg = assign_offsets(&g).unwrap_err().to_string();
    assert!(
        msg.contains("out of metadata space") && msg.contains("128"),
        "{msg}"
    );
    // Four fit exactly.
    let g = [node("w", &w[..4], &[1]), node("r", &r[..4], &[])];
    let o = assign_offsets(&g).unwrap();
    let mut offs: Vec<usize> = o[0].iter().map(|a| a.offset().unwrap()).collect();
    offs.sort();
    assert_eq!(offs, [0, 32, 64, 96]);
}

#[test]
fn sizes_must_agree_and_be_in_range() {
    let g = [
        node("w", &[("a", 4, W)], &[1]),
        node("r", &[("a", 8, R)], &[]),
    ];
    assert!(matches!(
        assign_offsets(&g),
        Err(MetadataError::SizeMismatch { .. })
    ));
    let g = [node("w", &[("a", 33, W)], &[])];
    assert!(matches!(
        assign_offsets(&g),
        Err(MetadataError::BadSize { .. })
    ));
}

#[test]
fn offsets_are_aligned_to_their_size() {
    let g = [
        node(
            "w",
            &[("b1", 1, W), ("b8", 8, W), ("b2", 2, W), ("b4", 4, W)],
            &[1],
        ),
        node(
            "r",
            &[("b1", 1, R), ("b8", 8, R), ("b2", 2, R), ("b4", 4, R)],
            &[],
        ),
    ];
    let o = assign_offsets(&g).unwrap();
    for a in &o[0] {
        let off = a.offset().unwrap();
        assert_eq!(off % a.size().next_power_of_two(), 0, "{a:?}");
    }
}
