//! The buffer map: entries by sensor key, in shards, each shard a slab of entries and a hash
//! index of slot numbers.
//!
//! A hash table that holds its entries inline keeps room for up to twice as many as it holds
//! (it doubles when seven eighths full), and a sensor's entry is the largest part of what the
//! buffers hold for a slow sensor. Here the entries sit in fixed-size chunks, filled in order
//! and reused through a free list, so they cost what they hold; only the index of 4-byte slot
//! numbers keeps the doubling's slack. The flusher's scan walks the chunks in memory order.
//!
//! Every shard is behind its own lock. A guard ([`Ref`], [`RefMut`]) holds its shard's lock,
//! so, as with any map guard here, no function that holds one may `.await`.

use std::borrow::Borrow;
use std::hash::BuildHasher as _;
use std::ops::ControlFlow;
use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use hashbrown::HashTable;

use super::span::BuildHasher;

/// Entries per chunk of a shard's slab.
const CHUNK: usize = 1024;

/// What the table keeps per entry beside the entry itself: its slot number in the index, and
/// the index's control byte.
pub(super) const INDEX_BYTES: usize = size_of::<u32>() + 1;

pub(super) struct Table<K, V> {
    shards: Box<[RwLock<Shard<K, V>>]>,
    /// Bits of the hash that pick the shard (the index uses the low bits and the top seven).
    shift: u32,
    hasher: BuildHasher,
}

pub(super) struct Shard<K, V> {
    index: HashTable<u32>,
    chunks: Vec<Chunk<K, V>>,
    /// Slots emptied by removal, reused first.
    free: Vec<u32>,
    /// Slots ever used: the next new one.
    used: u32,
}

/// `CHUNK` slots, each empty or an entry.
type Chunk<K, V> = Box<[Option<(K, V)>]>;

impl<K, V> Shard<K, V> {
    fn slot(&self, i: u32) -> &Option<(K, V)> {
        &self.chunks[i as usize / CHUNK][i as usize % CHUNK]
    }

    fn slot_mut(&mut self, i: u32) -> &mut Option<(K, V)> {
        &mut self.chunks[i as usize / CHUNK][i as usize % CHUNK]
    }

    fn entry(&self, i: u32) -> &(K, V) {
        self.slot(i).as_ref().expect("the index names only filled slots")
    }
}

impl<K: Borrow<str>, V> Shard<K, V> {
    fn find(&self, hash: u64, key: &str) -> Option<u32> {
        self.index.find(hash, |&i| self.entry(i).0.borrow() == key).copied()
    }
}

impl<K: Borrow<str>, V> Table<K, V> {
    pub fn new(hasher: BuildHasher) -> Table<K, V> {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let shards = (cores * 4).next_power_of_two();
        Table {
            shards: (0..shards)
                .map(|_| {
                    RwLock::new(Shard {
                        index: HashTable::new(),
                        chunks: Vec::new(),
                        free: Vec::new(),
                        used: 0,
                    })
                })
                .collect(),
            shift: 64 - shards.trailing_zeros(),
            hasher,
        }
    }

    fn hash(&self, key: &str) -> u64 {
        self.hasher.hash_one(key)
    }

    fn shard(&self, hash: u64) -> &RwLock<Shard<K, V>> {
        // Below the top seven bits, which the index keeps in its control bytes.
        let i = if self.shards.len() == 1 { 0 } else { ((hash << 7) >> self.shift) as usize };
        &self.shards[i]
    }

    fn read(&self, hash: u64) -> RwLockReadGuard<'_, Shard<K, V>> {
        self.shard(hash).read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self, hash: u64) -> RwLockWriteGuard<'_, Shard<K, V>> {
        self.shard(hash).write().unwrap_or_else(|e| e.into_inner())
    }

    pub fn get(&self, key: &str) -> Option<Ref<'_, K, V>> {
        let hash = self.hash(key);
        let shard = self.read(hash);
        let slot = shard.find(hash, key)?;
        Some(Guarded { shard, slot })
    }

    pub fn get_mut(&self, key: &str) -> Option<RefMut<'_, K, V>> {
        let hash = self.hash(key);
        let shard = self.write(hash);
        let slot = shard.find(hash, key)?;
        Some(Guarded { shard, slot })
    }

    /// The entry of `key`, made with `make` if there is none.
    pub fn get_or_insert_with(&self, key: K, make: impl FnOnce() -> V) -> RefMut<'_, K, V> {
        let hash = self.hash(key.borrow());
        let mut shard = self.write(hash);
        if let Some(slot) = shard.find(hash, key.borrow()) {
            return Guarded { shard, slot };
        }
        let slot = match shard.free.pop() {
            Some(slot) => slot,
            None => {
                let slot = shard.used;
                if slot as usize == shard.chunks.len() * CHUNK {
                    shard.chunks.push((0..CHUNK).map(|_| None).collect());
                }
                shard.used += 1;
                slot
            }
        };
        *shard.slot_mut(slot) = Some((key, make()));
        let Shard { index, chunks, .. } = &mut *shard;
        index.insert_unique(hash, slot, |&i| {
            let (key, _) = chunks[i as usize / CHUNK][i as usize % CHUNK].as_ref().expect("filled");
            self.hasher.hash_one(key.borrow())
        });
        Guarded { shard, slot }
    }

    /// Removes the entry of `key` if `remove` says so, and returns it.
    pub fn remove_if(&self, key: &str, remove: impl FnOnce(&V) -> bool) -> Option<(K, V)> {
        let hash = self.hash(key);
        let mut shard = self.write(hash);
        let slot = shard.find(hash, key)?;
        if !remove(&shard.entry(slot).1) {
            return None;
        }
        shard.index.find_entry(hash, |&i| i == slot).expect("found above").remove();
        shard.free.push(slot);
        shard.slot_mut(slot).take()
    }

    /// Calls `f` on every entry, shard by shard, each in slot order, until it breaks.
    pub fn for_each_mut(&self, mut f: impl FnMut(&K, &mut V) -> ControlFlow<()>) {
        for shard in self.shards.iter() {
            let mut shard = shard.write().unwrap_or_else(|e| e.into_inner());
            for (key, value) in shard.chunks.iter_mut().flat_map(|c| c.iter_mut()).flatten() {
                if f(key, value).is_break() {
                    return;
                }
            }
        }
    }

    /// Calls `f` on every entry.
    pub fn for_each(&self, mut f: impl FnMut(&K, &V)) {
        for shard in self.shards.iter() {
            let shard = shard.read().unwrap_or_else(|e| e.into_inner());
            for (key, value) in shard.chunks.iter().flat_map(|c| c.iter()).flatten() {
                f(key, value);
            }
        }
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.shards.iter().map(|s| s.read().unwrap_or_else(|e| e.into_inner()).index.len()).sum()
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// An entry, behind its shard's lock guard: [`Ref`] reads, [`RefMut`] also changes.
pub(super) struct Guarded<G> {
    shard: G,
    slot: u32,
}

pub(super) type Ref<'a, K, V> = Guarded<RwLockReadGuard<'a, Shard<K, V>>>;
pub(super) type RefMut<'a, K, V> = Guarded<RwLockWriteGuard<'a, Shard<K, V>>>;

impl<K: 'static, V: 'static, G> std::ops::Deref for Guarded<G>
where
    G: std::ops::Deref<Target = Shard<K, V>>,
{
    type Target = V;
    fn deref(&self) -> &V {
        &self.shard.entry(self.slot).1
    }
}

impl<K: 'static, V: 'static, G> std::ops::DerefMut for Guarded<G>
where
    G: std::ops::DerefMut<Target = Shard<K, V>>,
{
    fn deref_mut(&mut self) -> &mut V {
        let slot = self.slot;
        &mut self.shard.slot_mut(slot).as_mut().expect("the index names only filled slots").1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table() -> Table<String, u32> {
        Table::new(BuildHasher::default())
    }

    #[test]
    fn entries_are_found_changed_and_removed_by_key() {
        let t = table();
        assert!(t.get("a").is_none());
        *t.get_or_insert_with("a".into(), || 1) += 10;
        assert_eq!(*t.get_or_insert_with("a".into(), || 99), 11, "an existing entry is kept");
        *t.get_mut("a").unwrap() += 1;
        assert_eq!(*t.get("a").unwrap(), 12);
        assert_eq!(t.len(), 1);
        assert!(t.remove_if("a", |&v| v == 0).is_none(), "kept when the test says so");
        assert_eq!(t.remove_if("a", |&v| v == 12), Some(("a".to_string(), 12)));
        assert!(t.get("a").is_none() && t.is_empty());
    }

    /// Many entries over several chunks, half removed and their slots reused: every key still
    /// finds its own value, and a scan sees each entry once.
    #[test]
    fn slots_are_reused_and_every_entry_stays_reachable() {
        let t = table();
        let n = 5 * CHUNK as u32;
        for i in 0..n {
            t.get_or_insert_with(format!("k{i}"), || i);
        }
        for i in (0..n).step_by(2) {
            assert_eq!(t.remove_if(&format!("k{i}"), |_| true), Some((format!("k{i}"), i)));
        }
        let slots_before: usize =
            t.shards.iter().map(|s| s.read().unwrap().chunks.len()).sum::<usize>();
        for i in (0..n).step_by(2) {
            t.get_or_insert_with(format!("new{i}"), || n + i);
        }
        let slots_after: usize = t.shards.iter().map(|s| s.read().unwrap().chunks.len()).sum();
        assert_eq!(slots_before, slots_after, "freed slots are used before new chunks");
        for i in 0..n {
            let (key, want) =
                if i % 2 == 0 { (format!("new{i}"), n + i) } else { (format!("k{i}"), i) };
            assert_eq!(*t.get(&key).unwrap(), want, "{key}");
        }
        let mut seen = Vec::new();
        t.for_each(|k, &v| seen.push((k.clone(), v)));
        let mut seen_mut = 0;
        t.for_each_mut(|_, v| {
            *v += 1;
            seen_mut += 1;
            ControlFlow::Continue(())
        });
        assert_eq!((seen.len(), seen_mut), (n as usize, n as usize));
        seen.sort();
        seen.dedup();
        assert_eq!(seen.len(), n as usize, "each entry once");
        let mut stopped = 0;
        t.for_each_mut(|_, _| {
            stopped += 1;
            if stopped == 3 { ControlFlow::Break(()) } else { ControlFlow::Continue(()) }
        });
        assert_eq!(stopped, 3);
    }
}
