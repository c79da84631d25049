//! Hashes for maps keyed by block addresses and sizes, or by small numbers
//! (stream ids): one multiplication, where the standard library's SipHash
//! costs tens of nanoseconds on paths that run on every allocation and free.
#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// A multiplicative hash for block addresses (256-byte aligned numbers).
#[derive(Default)]
pub struct AddrHasher(u64);

impl Hasher for AddrHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ b as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = (n >> 8).wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(29);
    }
}

/// A map keyed by block addresses (or by well-mixed numbers).
pub type AddrMap<V> = HashMap<u64, V, BuildHasherDefault<AddrHasher>>;

/// A multiplicative hash for small numbers (stream ids: consecutive
/// integers, where [`AddrHasher`] would drop the low bits that differ).
#[derive(Default)]
pub struct NumHasher(u64);

impl Hasher for NumHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ b as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n.wrapping_mul(0x9E37_79B9_7F4A_7C15).rotate_left(29);
    }
}

/// A map keyed by small numbers (stream ids).
pub type NumMap<V> = HashMap<u64, V, BuildHasherDefault<NumHasher>>;
