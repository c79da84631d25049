//! The heap's index of free blocks: an ordered set of (size, address) that
//! best fit searches from a size upwards.
//!
//! It keeps exactly the order of a `BTreeSet<(u64, u64)>` (size, then
//! address), so best fit finds the same block it would there, but stores it
//! in buckets of sizes (eight per power of two, as a two-level segregated
//! fit allocator does), each a sorted vector, with a bitmap of the buckets
//! that hold any. A search looks at the request's own bucket from the
//! request's size on, then at whole buckets above it. On the recorded
//! PyTorch runs most buckets hold a few blocks, so an insertion or removal
//! is a short binary search and move in one or two cache lines, where a
//! B-tree of the same blocks walks two or three nodes. A bucket of many
//! blocks (more than [`LARGE`]: many free blocks of one size) keeps them in
//! a B-tree set of its own, so that no change costs more than a tree's.
#![forbid(unsafe_code)]

use std::collections::BTreeSet;

/// Sub-buckets per power of two (as a power of two).
const SUB_BITS: u32 = 3;
/// Buckets: sizes below `1 << SUB_BITS` have one each, every power of two
/// above has `1 << SUB_BITS`.
const BUCKETS: usize = (64 - SUB_BITS as usize + 1) << SUB_BITS;
const WORDS: usize = BUCKETS.div_ceil(64);

/// The bucket of a size: monotonic in the size.
fn bucket(size: u64) -> usize {
    if size < (1 << SUB_BITS) {
        return size as usize;
    }
    let top = 63 - size.leading_zeros(); // >= SUB_BITS
    let sub = (size >> (top - SUB_BITS)) as usize & ((1 << SUB_BITS) - 1);
    (((top - SUB_BITS + 1) as usize) << SUB_BITS) | sub
}

/// A bucket that holds more pairs than this keeps them in a B-tree set of
/// its own (many free blocks of one size: a move in a sorted vector would
/// cost more than the tree's walk), and goes back to a vector below
/// [`SMALL_AGAIN`].
const LARGE: usize = 256;
const SMALL_AGAIN: usize = 64;

/// An ordered set of (size, address) pairs.
#[derive(Debug, Clone)]
pub struct FreeSet {
    /// Each bucket's pairs, in order (empty for a bucket in `trees`).
    buckets: Vec<Vec<(u64, u64)>>,
    /// Which buckets hold any pair.
    nonempty: [u64; WORDS],
    /// The buckets of more than [`LARGE`] pairs (usually none).
    trees: Vec<(usize, BTreeSet<(u64, u64)>)>,
    len: usize,
}

impl Default for FreeSet {
    fn default() -> FreeSet {
        FreeSet { buckets: Vec::new(), nonempty: [0; WORDS], trees: Vec::new(), len: 0 }
    }
}

impl FreeSet {
    /// Adds `key`; false if it was there.
    pub fn insert(&mut self, key: (u64, u64)) -> bool {
        let b = bucket(key.0);
        if let Some(tree) = self.tree_mut(b) {
            if !tree.insert(key) {
                return false;
            }
        } else {
            if self.buckets.len() <= b {
                self.buckets.resize_with(b + 1, Vec::new);
            }
            let v = &mut self.buckets[b];
            let Err(i) = v.binary_search(&key) else { return false };
            v.insert(i, key);
            if v.len() > LARGE {
                let tree = v.drain(..).collect();
                self.trees.push((b, tree));
            }
        }
        self.nonempty[b / 64] |= 1 << (b % 64);
        self.len += 1;
        true
    }

    /// Removes `key`; false if it was not there.
    pub fn remove(&mut self, key: &(u64, u64)) -> bool {
        let b = bucket(key.0);
        let in_tree = self.tree_index(b);
        let empty = if let Some(t) = in_tree {
            if !self.trees[t].1.remove(key) {
                return false;
            }
            if self.trees[t].1.len() < SMALL_AGAIN {
                let (_, tree) = self.trees.swap_remove(t);
                if let Some(v) = self.buckets.get_mut(b) {
                    *v = tree.into_iter().collect();
                }
            }
            false
        } else {
            let Some(v) = self.buckets.get_mut(b) else { return false };
            let Ok(i) = v.binary_search(key) else { return false };
            v.remove(i);
            v.is_empty()
        };
        if empty {
            self.nonempty[b / 64] &= !(1 << (b % 64));
        }
        self.len -= 1;
        true
    }

    /// Whether `key` is in the set.
    pub fn contains(&self, key: &(u64, u64)) -> bool {
        let b = bucket(key.0);
        if let Some(tree) = self.tree(b) {
            return tree.contains(key);
        }
        self.buckets.get(b).is_some_and(|v| v.binary_search(key).is_ok())
    }

    /// How many pairs the set holds.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The pairs of at least `size` bytes, in order (a `BTreeSet`'s
    /// `range((size, 0)..)`).
    pub fn at_least(&self, size: u64) -> Iter<'_> {
        let b = bucket(size);
        let mut it = Iter { set: self, current: &[], tree_from: None, bucket: b };
        if self.tree_index(b).is_some() {
            it.tree_from = Some((size, 0));
        } else if let Some(v) = self.buckets.get(b) {
            it.current = &v[v.partition_point(|&(s, _)| s < size)..];
        }
        it
    }

    /// Every pair, in order.
    pub fn iter(&self) -> Iter<'_> {
        self.at_least(0)
    }

    /// Where bucket `b`'s tree is in `trees`, if it keeps its pairs in
    /// one (one read where no bucket does).
    #[inline]
    fn tree_index(&self, b: usize) -> Option<usize> {
        if self.trees.is_empty() {
            return None;
        }
        self.trees.iter().position(|(tb, _)| *tb == b)
    }

    /// Bucket `b`'s tree, if it keeps its pairs in one.
    fn tree(&self, b: usize) -> Option<&BTreeSet<(u64, u64)>> {
        self.tree_index(b).map(|t| &self.trees[t].1)
    }

    fn tree_mut(&mut self, b: usize) -> Option<&mut BTreeSet<(u64, u64)>> {
        self.tree_index(b).map(|t| &mut self.trees[t].1)
    }

    /// The first nonempty bucket after `b`.
    fn next_bucket(&self, b: usize) -> Option<usize> {
        let mut from = b + 1;
        while from < BUCKETS {
            let word = self.nonempty[from / 64] >> (from % 64);
            if word != 0 {
                return Some(from + word.trailing_zeros() as usize);
            }
            from = (from / 64 + 1) * 64;
        }
        None
    }
}

impl<'a> IntoIterator for &'a FreeSet {
    type Item = &'a (u64, u64);
    type IntoIter = Iter<'a>;

    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

/// The pairs of a [`FreeSet`] from a size on, in order.
pub struct Iter<'a> {
    set: &'a FreeSet,
    /// What is left of the current bucket: a vector's, or, where it keeps
    /// its pairs in a tree, the tree's from this pair on (a search each:
    /// such buckets are rare, and the usual one's iterator stays small).
    current: &'a [(u64, u64)],
    tree_from: Option<(u64, u64)>,
    bucket: usize,
}

impl<'a> Iterator for Iter<'a> {
    type Item = &'a (u64, u64);

    fn next(&mut self) -> Option<&'a (u64, u64)> {
        loop {
            if let Some(from) = self.tree_from {
                let next = self.set.tree(self.bucket).and_then(|t| t.range(from..).next());
                self.tree_from = next.and_then(|&(s, a)| match a.checked_add(1) {
                    Some(a) => Some((s, a)),
                    None => s.checked_add(1).map(|s| (s, 0)),
                });
                if next.is_some() {
                    return next;
                }
            }
            if let Some((first, rest)) = self.current.split_first() {
                self.current = rest;
                return Some(first);
            }
            let b = self.set.next_bucket(self.bucket)?;
            self.bucket = b;
            if self.set.tree_index(b).is_some() {
                self.tree_from = Some((0, 0));
            } else {
                self.current = self.set.buckets.get(b).map_or(&[], |v| v.as_slice());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_grow_with_the_size() {
        let mut prev = 0;
        for size in 0..100_000u64 {
            let b = bucket(size);
            assert!(b >= prev, "size {size}: bucket {b} below {prev}");
            prev = b;
        }
        for p in 3..64 {
            let (below, at) = (bucket((1u64 << p) - 1), bucket(1u64 << p));
            assert!(below < at && at < BUCKETS, "2^{p}: {below}, {at}");
        }
        assert_eq!(bucket(u64::MAX), BUCKETS - 1);
    }

    /// The same operations on a `FreeSet` and a `BTreeSet` give the same
    /// answers, and the same pairs in the same order from any size.
    #[test]
    fn it_keeps_a_btree_sets_order() {
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        let mut rand = move || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut ours = FreeSet::default();
        let mut theirs = BTreeSet::new();
        for round in 0..20_000 {
            let r = rand();
            // Sizes from a few bytes to terabytes, many equal ones.
            let size = match r % 5 {
                4 => 4096 + rand() % 2 * 256,
                0 => rand() % 64,
                1 => (rand() % 16 + 1) << 20,
                2 => rand() % (1 << 30),
                _ => rand() >> (rand() % 64),
            };
            let key = (size, rand() % 1024 * 4096);
            if rand() % 3 == 0 && !theirs.is_empty() {
                // Remove one that is there.
                let k = *theirs.iter().nth((rand() % theirs.len() as u64) as usize).unwrap();
                assert_eq!(ours.remove(&k), theirs.remove(&k), "round {round}");
            } else if rand() % 2 == 0 {
                assert_eq!(ours.insert(key), theirs.insert(key), "round {round}");
            } else {
                assert_eq!(ours.remove(&key), theirs.remove(&key), "round {round}");
            }
            assert_eq!(ours.len(), theirs.len());
            assert_eq!(ours.is_empty(), theirs.is_empty());
            if round % 97 == 0 {
                let from = match rand() % 3 {
                    0 => size,
                    1 => rand() >> (rand() % 64),
                    _ => 0,
                };
                let a: Vec<_> = ours.at_least(from).copied().collect();
                let b: Vec<_> = theirs.range((from, 0)..).copied().collect();
                assert_eq!(a, b, "round {round}, from {from}");
                assert!(ours.contains(&key) == theirs.contains(&key));
            }
        }
        let a: Vec<_> = ours.iter().copied().collect();
        let b: Vec<_> = theirs.iter().copied().collect();
        assert_eq!(a, b);
    }

    /// A bucket of many blocks of one size goes into a tree and back (past
    /// [`LARGE`], below [`SMALL_AGAIN`]) and keeps its order.
    #[test]
    fn a_bucket_of_many_blocks_keeps_its_order() {
        let mut ours = FreeSet::default();
        let mut theirs = BTreeSet::new();
        let check = |ours: &FreeSet, theirs: &BTreeSet<(u64, u64)>| {
            assert_eq!(ours.len(), theirs.len());
            for from in [0, 4095, 4096, 4097, 4352, 5000, 1 << 20] {
                let a: Vec<_> = ours.at_least(from).copied().collect();
                let b: Vec<_> = theirs.range((from, 0)..).copied().collect();
                assert_eq!(a, b, "from {from}");
            }
        };
        // Many free blocks of 4 KiB and a few of 4.25 KiB (one bucket), and
        // larger ones above it.
        assert_eq!(bucket(4096), bucket(4352));
        for k in (0..3 * LARGE as u64).rev() {
            for key in [(4096, k * 8192), (4352, k * 8192 + 4096), (1 << 20, k << 21)] {
                if key.0 != 4352 || k % 16 == 0 {
                    assert_eq!(ours.insert(key), theirs.insert(key));
                }
            }
        }
        assert!(ours.tree(bucket(4096)).is_some() && ours.tree(bucket(1 << 20)).is_some());
        check(&ours, &theirs);
        assert!(!ours.insert((4096, 0)) && ours.contains(&(4096, 8192)) && !ours.contains(&(4096, 1)));
        // Removed down past the bound: a vector again, the same order.
        for k in 0..3 * LARGE as u64 - 10 {
            assert_eq!(ours.remove(&(4096, k * 8192)), theirs.remove(&(4096, k * 8192)));
            if k % 97 == 0 {
                check(&ours, &theirs);
            }
        }
        assert!(ours.tree(bucket(4096)).is_none(), "a vector again");
        check(&ours, &theirs);
        assert!(!ours.remove(&(4096, 0)));
        for k in 0..3 * LARGE as u64 {
            assert_eq!(ours.remove(&(1 << 20, k << 21)), theirs.remove(&(1 << 20, k << 21)));
        }
        check(&ours, &theirs);
    }

    #[test]
    fn an_empty_set_yields_nothing() {
        let s = FreeSet::default();
        assert_eq!(s.at_least(0).count(), 0);
        assert_eq!(s.at_least(u64::MAX).count(), 0);
        assert!(!s.contains(&(1, 1)));
        let mut s = FreeSet::default();
        assert!(!s.remove(&(5, 5)));
        assert!(s.insert((u64::MAX, 0)));
        assert_eq!(s.at_least(u64::MAX).copied().collect::<Vec<_>>(), vec![(u64::MAX, 0)]);
        assert_eq!(s.at_least(7).count(), 1);
        assert!(s.remove(&(u64::MAX, 0)));
        assert!(s.is_empty());
        assert_eq!(s.iter().count(), 0);
    }
}
