//! A map that keeps only its newest entries: what the host remembers of
//! recent calls and prompts, in memory, without growing.

use std::collections::{HashMap, VecDeque};
use std::hash::Hash;

/// At most `capacity` entries; inserting past it forgets the oldest. A
/// lookup is a hash probe, not a scan.
#[derive(Debug)]
pub(crate) struct BoundedMap<K, V> {
    capacity: usize,
    values: HashMap<K, V>,
    order: VecDeque<K>,
}

impl<K: Eq + Hash + Clone, V> BoundedMap<K, V> {
    pub(crate) fn new(capacity: usize) -> Self {
        Self {
            capacity: capacity.max(1),
            values: HashMap::new(),
            order: VecDeque::new(),
        }
    }

    pub(crate) fn get(&self, key: &K) -> Option<&V> {
        self.values.get(key)
    }

    /// Set `key` (a new key counts as the newest; a known one keeps its
    /// place).
    pub(crate) fn insert(&mut self, key: K, value: V) {
        if let Some(known) = self.values.get_mut(&key) {
            *known = value;
            return;
        }
        if self.order.len() == self.capacity
            && let Some(oldest) = self.order.pop_front()
        {
            self.values.remove(&oldest);
        }
        self.order.push_back(key.clone());
        self.values.insert(key, value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_entry_goes_first_and_a_known_key_keeps_its_place() {
        let mut map = BoundedMap::new(2);
        map.insert("a", 1);
        map.insert("b", 2);
        map.insert("a", 3);
        map.insert("c", 4);
        assert_eq!(map.get(&"a"), None, "a was the oldest");
        assert_eq!((map.get(&"b"), map.get(&"c")), (Some(&2), Some(&4)));
    }
}
