//! Configuration of the CPU emulation, from the environment or set in code.
#![forbid(unsafe_code)]

use crate::error::{Error, Result};

/// How the CPU emulation is set up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostConfig {
    /// Number of emulated devices (`HIPMEM_HOST_DEVICES`, default 1).
    pub devices: usize,
    /// Capacity of each device in bytes (`HIPMEM_HOST_MEMORY`, default 16 GiB),
    /// enforced: going past it is OutOfMemory.
    pub memory_per_device: u64,
    /// Granularity of virtual-memory physical allocations
    /// (`HIPMEM_HOST_VMM_GRANULARITY`, default 2 MiB, a power of two, at least
    /// the page size).
    pub vmm_granularity: u64,
    /// Modelled cost of one on-demand migration (a page fault) of managed
    /// memory, in nanoseconds per page (`HIPMEM_HOST_FAULT_LATENCY_NS`,
    /// default 2000), on top of the transfer at `migration_bandwidth`.
    pub fault_latency_ns: u64,
    /// Modelled bandwidth of managed-memory migrations and prefetches, bytes
    /// per second (`HIPMEM_HOST_MIGRATION_BANDWIDTH`, a size such as `16G`,
    /// default 16 GiB/s).
    pub migration_bandwidth: u64,
    /// Addresses the emulated process may hold reserved for virtual memory
    /// at once, in bytes (`HIPMEM_HOST_ADDRESS_SPACE`, a size, default 128
    /// TiB, at least 1 GiB): reserving past it is OutOfMemory, as on a GPU,
    /// whose address space is finite too (each pool on virtual memory
    /// reserves twelve times its device's memory).
    pub address_space: u64,
}

impl Default for HostConfig {
    fn default() -> Self {
        HostConfig {
            devices: 1,
            memory_per_device: 16 << 30,
            vmm_granularity: 2 << 20,
            fault_latency_ns: 2000,
            migration_bandwidth: 16 << 30,
            address_space: 128 << 40,
        }
    }
}

impl HostConfig {
    /// Reads `HIPMEM_HOST_DEVICES`, `HIPMEM_HOST_MEMORY`,
    /// `HIPMEM_HOST_VMM_GRANULARITY`, `HIPMEM_HOST_FAULT_LATENCY_NS`,
    /// `HIPMEM_HOST_MIGRATION_BANDWIDTH` and `HIPMEM_HOST_ADDRESS_SPACE`;
    /// unset variables keep the defaults.
    pub fn from_env() -> Result<HostConfig> {
        let mut config = HostConfig::default();
        if let Ok(v) = std::env::var("HIPMEM_HOST_DEVICES") {
            config.devices = v.trim().parse().map_err(|_| {
                Error::InvalidValue(format!("HIPMEM_HOST_DEVICES={v:?} is not a whole number"))
            })?;
        }
        if let Ok(v) = std::env::var("HIPMEM_HOST_MEMORY") {
            config.memory_per_device =
                parse_size(&v).map_err(|e| e.context(format!("HIPMEM_HOST_MEMORY={v:?}")))?;
        }
        if let Ok(v) = std::env::var("HIPMEM_HOST_VMM_GRANULARITY") {
            config.vmm_granularity =
                parse_size(&v).map_err(|e| e.context(format!("HIPMEM_HOST_VMM_GRANULARITY={v:?}")))?;
        }
        if let Ok(v) = std::env::var("HIPMEM_HOST_FAULT_LATENCY_NS") {
            config.fault_latency_ns = v.trim().parse().map_err(|_| {
                Error::InvalidValue(format!("HIPMEM_HOST_FAULT_LATENCY_NS={v:?} is not a whole number"))
            })?;
        }
        if let Ok(v) = std::env::var("HIPMEM_HOST_MIGRATION_BANDWIDTH") {
            config.migration_bandwidth =
                parse_size(&v).map_err(|e| e.context(format!("HIPMEM_HOST_MIGRATION_BANDWIDTH={v:?}")))?;
        }
        if let Ok(v) = std::env::var("HIPMEM_HOST_ADDRESS_SPACE") {
            config.address_space =
                parse_size(&v).map_err(|e| e.context(format!("HIPMEM_HOST_ADDRESS_SPACE={v:?}")))?;
        }
        config.validate()?;
        Ok(config)
    }

    /// Checks the values: 1 to 64 devices, a capacity of at least 1 MiB, a
    /// power-of-two granularity of at least 4 KiB.
    pub fn validate(&self) -> Result<()> {
        if self.devices == 0 || self.devices > 64 {
            return Err(Error::InvalidValue(format!(
                "the host backend emulates 1 to 64 devices, not {}",
                self.devices
            )));
        }
        if self.memory_per_device < (1 << 20) {
            return Err(Error::InvalidValue(format!(
                "device capacity {} bytes is below the 1 MiB minimum",
                self.memory_per_device
            )));
        }
        if !self.vmm_granularity.is_power_of_two() || self.vmm_granularity < 4096 {
            return Err(Error::InvalidValue(format!(
                "VMM granularity {} must be a power of two of at least 4096",
                self.vmm_granularity
            )));
        }
        if self.migration_bandwidth == 0 {
            return Err(Error::InvalidValue("the modelled migration bandwidth must not be 0".into()));
        }
        if self.address_space < (1 << 30) {
            return Err(Error::InvalidValue(format!(
                "an address space of {} bytes is below the 1 GiB minimum",
                self.address_space
            )));
        }
        Ok(())
    }
}

/// Parses a byte count: a whole number with an optional binary suffix
/// (`K`, `M`, `G`, `T`, with or without `i`/`B`), e.g. `512M`, `16GiB`.
pub fn parse_size(text: &str) -> Result<u64> {
    let t = text.trim();
    let digits_end = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (number, suffix) = t.split_at(digits_end);
    let number: u64 = number
        .parse()
        .map_err(|_| Error::InvalidValue(format!("{text:?} is not a size like 512M or 16G")))?;
    let shift = match suffix.trim().to_ascii_uppercase().trim_end_matches('B').trim_end_matches('I') {
        "" => 0,
        "K" => 10,
        "M" => 20,
        "G" => 30,
        "T" => 40,
        _ => {
            return Err(Error::InvalidValue(format!("{text:?} has an unknown size suffix")));
        }
    };
    number.checked_mul(1u64 << shift).ok_or_else(|| Error::InvalidValue(format!("{text:?} is too large")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_binary_suffixes() {
        assert_eq!(parse_size("4096").unwrap(), 4096);
        assert_eq!(parse_size("512M").unwrap(), 512 << 20);
        assert_eq!(parse_size("16GiB").unwrap(), 16 << 30);
        assert_eq!(parse_size("2k").unwrap(), 2048);
        assert!(parse_size("twelve").is_err());
        assert!(parse_size("12Q").is_err());
        assert!(parse_size("99999999999T").is_err());
    }

    #[test]
    fn validation_rejects_nonsense() {
        let ok = HostConfig::default();
        assert!(ok.validate().is_ok());
        assert!(HostConfig { devices: 0, ..ok.clone() }.validate().is_err());
        assert!(HostConfig { memory_per_device: 10, ..ok.clone() }.validate().is_err());
        assert!(HostConfig { vmm_granularity: 3000, ..ok.clone() }.validate().is_err());
        assert!(HostConfig { address_space: 1 << 20, ..ok }.validate().is_err());
    }
}
