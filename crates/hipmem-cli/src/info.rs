//! `hipmem info`: what the backend and its devices are and can do.

use hipmem::{DeviceProperties, MemInfo, Runtime};
use serde::Serialize;

use crate::report::bytes;

#[derive(Serialize)]
struct DeviceReport<'a> {
    #[serde(flatten)]
    properties: &'a DeviceProperties,
    memory: MemInfo,
}

#[derive(Serialize)]
struct InfoReport<'a> {
    backend: hipmem::BackendKind,
    description: String,
    devices: Vec<DeviceReport<'a>>,
}

/// Prints the report, as text or one JSON object.
pub fn run(rt: &Runtime, json: bool) -> hipmem::Result<()> {
    let mut devices = Vec::new();
    for d in 0..rt.device_count() {
        devices.push(DeviceReport { properties: rt.device_properties(d)?, memory: rt.mem_get_info(d)? });
    }
    let report = InfoReport { backend: rt.backend_kind(), description: rt.backend().description(), devices };
    if json {
        let text = serde_json::to_string_pretty(&report)
            .map_err(|e| hipmem::Error::Unknown(format!("cannot write JSON: {e}")))?;
        println!("{text}");
        return Ok(());
    }
    println!("backend: {}", report.description);
    println!("devices: {}", report.devices.len());
    for d in &report.devices {
        let p = d.properties;
        let c = &p.capabilities;
        println!();
        println!("device {}: {}", p.ordinal, p.name);
        println!("  memory:              {} total, {} free", bytes(d.memory.total), bytes(d.memory.free));
        println!("  compute capability:  {}.{}", p.compute_capability.0, p.compute_capability.1);
        println!("  multiprocessors:     {}", p.multiprocessor_count);
        let yes = |b: bool| if b { "yes" } else { "no" };
        println!("  memory pools:        {}", yes(c.memory_pools));
        println!("  virtual memory:      {}", yes(c.virtual_memory));
        println!("  managed memory:      {}", yes(c.managed_memory));
        println!("  concurrent managed:  {}", yes(c.concurrent_managed_access));
        println!("  map host memory:     {}", yes(c.can_map_host_memory));
        println!("  unified addressing:  {}", yes(c.unified_addressing));
        println!(
            "  VMM granularity:     {} minimum, {} recommended",
            bytes(c.vmm_granularity),
            bytes(c.vmm_recommended_granularity)
        );
    }
    Ok(())
}
