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
//! B-tree of the same blocks walks two or three nodes.
#![forbid(unsafe_code)]

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

/// An ordered set of (size, address) pairs.
#[derive(Debug, Clone)]
pub struct FreeSet {
    /// Each bucket's pairs, in order.
    buckets: Vec<Vec<(u64, u64)>>,
    /// Which buckets hold any pair.
    nonempty: [u64; WORDS],
    len: usize,
}

impl Default for FreeSet {
    fn default() -> FreeSet {
        FreeSet { buckets: Vec::new(), nonempty: [0; WORDS], len: 0 }
    }
}

impl FreeSet {
    /// Adds `key`; false if it was there.
    pub fn insert(&mut self, key: (u64, u64)) -> bool {
        let b = bucket(key.0);
        if self.buckets.len() <= b {
            self.buckets.resize_with(b + 1, Vec::new);
        }
        let v = &mut self.buckets[b];
        match v.binary_search(&key) {
            Ok(_) => false,
            Err(i) => {
                v.insert(i, key);
                self.nonempty[b / 64] |= 1 << (b % 64);
                self.len += 1;
                true
            }
        }
    }

    /// Removes `key`; false if it was not there.
    pub fn remove(&mut self, key: &(u64, u64)) -> bool {
        let b = bucket(key.0);
        let Some(v) = self.buckets.get_mut(b) else { return false };
        match v.binary_search(key) {
            Ok(i) => {
                v.remove(i);
                if v.is_empty() {
                    self.nonempty[b / 64] &= !(1 << (b % 64));
                }
                self.len -= 1;
                true
            }
            Err(_) => false,
        }
    }

    /// Whether `key` is in the set.
    pub fn contains(&self, key: &(u64, u64)) -> bool {
        self.buckets.get(bucket(key.0)).is_some_and(|v| v.binary_search(key).is_ok())
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
        let first = match self.buckets.get(b) {
            Some(v) => &v[v.partition_point(|&(s, _)| s < size)..],
            None => &[],
        };
        Iter { set: self, current: first, bucket: b }
    }

    /// Every pair, in order.
    pub fn iter(&self) -> Iter<'_> {
        self.at_least(0)
    }

    /// The first nonempty bucket after `b`.
    fn next_bucket(&self, b: usize) -> Option<usize> {
        let mut from = b + 1;
        while from < BUCKETS {
            let word = self.nonempty[from / 64] >> (from % 64);
            if word != 0 {
                let found = from + word.trailing_zeros() as usize;
                return (found < self.buckets.len()).then_some(found);
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
    /// What is left of the current bucket.
    current: &'a [(u64, u64)],
    bucket: usize,
}

impl<'a> Iterator for Iter<'a> {
    type Item = &'a (u64, u64);

    fn next(&mut self) -> Option<&'a (u64, u64)> {
        loop {
            if let Some((first, rest)) = self.current.split_first() {
                self.current = rest;
                return Some(first);
            }
            let b = self.set.next_bucket(self.bucket)?;
            self.bucket = b;
            self.current = &self.set.buckets[b];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

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
            let size = match r % 4 {
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
