//! Names derived from ids for the host's own namespaces (nftables tables, network namespaces),
//! which take fewer characters than key segments do.

/// A 64-bit FNV-1a hash of `text`: the same on every build and platform, so a name derived
/// from an id is found again by the next agent.
pub(crate) fn stable_hash(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |hash, byte| {
        (hash ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hash_is_stable_and_tells_names_apart() {
        assert_eq!(stable_hash(""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(stable_hash("a"), 0xaf63_dc4c_8601_ec8c);
        assert_ne!(stable_hash("n-1"), stable_hash("n_1"));
    }
}
