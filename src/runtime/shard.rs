//! Which worker of a fleet runs which monitor.

use uuid::Uuid;

use crate::config::Shard;

/// Stable assignment by monitor id: the same monitor always lands on the
/// same shard for a given shard count, whatever else exists. Monitor ids are
/// random (UUID v4), so shards fill evenly.
pub fn owns(shard: Shard, monitor: Uuid) -> bool {
    let count = u128::from(shard.count.max(1));
    (monitor.as_u128() % count) + 1 == u128::from(shard.index)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    proptest! {
        #[test]
        fn every_monitor_belongs_to_exactly_one_shard(bits in any::<u128>(), count in 1u32..64) {
            let id = Uuid::from_u128(bits);
            let owners = (1..=count).filter(|&index| owns(Shard { index, count }, id)).count();
            prop_assert_eq!(owners, 1);
        }
    }

    #[test]
    fn a_single_shard_owns_everything() {
        assert!(owns(Shard { index: 1, count: 1 }, Uuid::new_v4()));
    }

    #[test]
    fn shards_fill_roughly_evenly() {
        let count = 4;
        let mut per_shard = [0u32; 4];
        for _ in 0..4000 {
            let id = Uuid::new_v4();
            let index = (1..=count)
                .find(|&i| owns(Shard { index: i, count }, id))
                .unwrap();
            per_shard[(index - 1) as usize] += 1;
        }
        assert!(
            per_shard.iter().all(|&n| (800..1200).contains(&n)),
            "{per_shard:?}"
        );
    }
}
