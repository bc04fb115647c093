//! The Vulkan executor (feature `vulkan`) for shader artifacts written by `rlxc compile --target
//! vulkan`: `NAME.spv` (one SPIR-V module, entry points `k0`, `k1`, …), `NAME.schedule.bin` and
//! `NAME.weights.bin`.
//!
//! The Vulkan loader (`libvulkan.so.1`) is opened at run time (ash's `loaded` feature): building needs
//! no SDK, and a machine without Vulkan gets [`VkError`] from [`Executor::new`], not a link error.
//!
//! Setup (once, in `new`): instance, the first physical device with a compute queue (or the one
//! `RLX_VULKAN_DEVICE=i` names), one storage buffer per schedule base (arena, weights, each input,
//! each output; the weights are copied in once) — host-visible and mapped on CPU and integrated
//! devices (lavapipe), device-local on discrete GPUs with host-visible staging buffers for the inputs
//! and outputs —, one descriptor set (bindings i and n + i = base i) shared by every pipeline, one
//! compute pipeline per entry point, and one command buffer recording (staged input copies,) the
//! dispatches in barrier-separated levels (, staged output copies). `run` copies the inputs in,
//! submits that same command buffer, waits on a fence, and copies the outputs out.
//!
//! Barriers: the schedule lists the byte ranges each dispatch reads and writes. Two dispatches
//! conflict when a range of one overlaps a range of the other in the same buffer and either writes
//! it (read-after-write, write-after-read, write-after-write; arena bytes the planner reuses are
//! ranges like any other). [`Schedule::levels`] puts each dispatch one level after the last earlier
//! dispatch it conflicts with, and the executor records level after level with one compute→compute
//! barrier between consecutive levels: independent dispatches (MiniLM's Q, K and V projections) share
//! one. `RLX_VULKAN_BARRIERS=all` records schedule order with a barrier between every two dispatches,
//! `inorder` schedule order with a barrier only where a conflict needs one (for comparisons).
//!
//! Unlike the rest of runtime-min this module allocates (at setup) and uses `std`.

use ash::vk;
use std::format;
use std::string::String;
use std::vec::Vec;

pub use crate::schedule::{conflict, Access, BaseKind, Barriers, Dispatch, Range, Schedule, SCHEDULE_MAGIC, SCHEDULE_VERSION};

/// What went wrong, in words (no Vulkan loader, no device, a malformed schedule, a Vulkan error).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VkError(pub String);

impl core::fmt::Display for VkError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for VkError {}

impl From<crate::schedule::ScheduleError> for VkError {
    fn from(e: crate::schedule::ScheduleError) -> VkError {
        VkError(e.0)
    }
}

fn vkerr(what: &str) -> impl Fn(vk::Result) -> VkError + '_ {
    move |r| VkError(format!("{what}: {r}"))
}

struct Buf {
    buffer: vk::Buffer,
    memory: vk::DeviceMemory,
    /// Where the host reads or writes this base: the buffer's own mapping (host-visible memory), or
    /// the mapping of `staging` (device-local memory; inputs and outputs only), or null (the arena and
    /// weights in device-local memory).
    ptr: *mut u8,
    bytes: u64,
    /// A host-visible buffer the recorded command buffer copies from (inputs) or to (outputs).
    staging: Option<(vk::Buffer, vk::DeviceMemory)>,
}

/// A loaded artifact on one Vulkan device, ready to run any number of times.
pub struct Executor {
    _entry: ash::Entry,
    instance: ash::Instance,
    device: ash::Device,
    queue: vk::Queue,
    bufs: Vec<Buf>,
    kinds: Vec<BaseKind>,
    shader: vk::ShaderModule,
    dsl: vk::DescriptorSetLayout,
    layout: vk::PipelineLayout,
    pipelines: Vec<vk::Pipeline>,
    pool: vk::DescriptorPool,
    cmd_pool: vk::CommandPool,
    cmd: vk::CommandBuffer,
    fence: vk::Fence,
    device_name: String,
    n_inputs: usize,
    n_outputs: usize,
    device_local: bool,
    /// `RLX_VULKAN_PROFILE=1` at setup: a timestamp before the first dispatch and after each one.
    queries: vk::QueryPool,
    n_queries: u32,
    ns_per_tick: f64,
    /// The schedule's dispatch indices in recorded order, and the compute→compute barriers between them.
    order: Vec<usize>,
    barriers: usize,
}

impl Executor {
    /// Loads `DIR/NAME.spv`, `DIR/NAME.schedule.bin` and `DIR/NAME.weights.bin` (absent = no weights).
    pub fn load(dir: &std::path::Path, name: &str) -> Result<Executor, VkError> {
        let read = |f: String| std::fs::read(dir.join(&f)).map_err(|e| VkError(format!("cannot read {}: {e}", dir.join(&f).display())));
        let spv = read(format!("{name}.spv"))?;
        let sched = read(format!("{name}.schedule.bin"))?;
        let wpath = dir.join(format!("{name}.weights.bin"));
        let weights = if wpath.exists() { read(format!("{name}.weights.bin"))? } else { Vec::new() };
        Executor::new(&spv, &sched, &weights)
    }

    /// Sets up the device, buffers, pipelines and the command buffer.
    pub fn new(spirv: &[u8], schedule: &[u8], weights: &[u8]) -> Result<Executor, VkError> {
        let sched = Schedule::parse(schedule)?;
        if sched.collectives() > 0 {
            return Err(VkError(format!("the schedule has {} collectives (a sharded CUDA rank): the Vulkan executor runs no collectives; compile the shards with --target cuda and run them with the nccl feature", sched.collectives())));
        }
        if sched.bases.iter().any(|b| b.0 == BaseKind::State) {
            return Err(VkError("the schedule keeps state between runs (a KV cache): the Vulkan executor does not; compile it with --target cuda or a CPU target".into()));
        }
        let how = Barriers::from_env()?;
        if spirv.len() % 4 != 0 || spirv.len() < 20 {
            return Err(VkError("the SPIR-V module's length is not a positive multiple of 4".into()));
        }
        let words: Vec<u32> = spirv.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
        if words[0] != 0x0723_0203 {
            return Err(VkError("not a SPIR-V module (bad magic)".into()));
        }
        for (k, bytes) in &sched.bases {
            if *k == BaseKind::Weights && *bytes != weights.len() as u64 {
                return Err(VkError(format!("the schedule wants {bytes} bytes of weights, {} were given", weights.len())));
            }
        }
        // SAFETY: loading the system's Vulkan loader runs its initialization; nothing else is shared.
        let entry = unsafe { ash::Entry::load() }.map_err(|e| VkError(format!("no Vulkan loader (libvulkan.so.1): {e}")))?;
        let app = vk::ApplicationInfo::default().application_name(c"rlx-rt").api_version(vk::make_api_version(0, 1, 1, 0));
        let ici = vk::InstanceCreateInfo::default().application_info(&app);
        // SAFETY: valid create info; the instance is destroyed in Drop (or below on failure).
        let instance = unsafe { entry.create_instance(&ici, None) }.map_err(vkerr("vkCreateInstance"))?;
        // From here on, a failure destroys what was created (the instance, or the partial executor).
        Self::setup(entry, instance, sched, how, &words, weights)
    }

    fn setup(entry: ash::Entry, instance: ash::Instance, mut sched: Schedule, how: Barriers, words: &[u32], weights: &[u8]) -> Result<Executor, VkError> {
        // SAFETY (whole function): every Vulkan call gets handles created above from the same
        // instance/device and create infos that live across the call.
        unsafe {
            let fail = |instance: &ash::Instance, e: VkError| {
                instance.destroy_instance(None);
                e
            };
            let pds = instance.enumerate_physical_devices().map_err(|e| fail(&instance, vkerr("vkEnumeratePhysicalDevices")(e)))?;
            let want: Option<usize> = std::env::var("RLX_VULKAN_DEVICE").ok().and_then(|s| s.parse().ok());
            let mut pick = None;
            for (i, &pd) in pds.iter().enumerate() {
                if want.is_some_and(|w| w != i) {
                    continue;
                }
                let qf = instance.get_physical_device_queue_family_properties(pd);
                if let Some(q) = qf.iter().position(|f| f.queue_flags.contains(vk::QueueFlags::COMPUTE)) {
                    pick = Some((pd, q as u32));
                    break;
                }
            }
            let Some((pd, qfi)) = pick else {
                return Err(fail(&instance, VkError(format!("no Vulkan device with a compute queue ({} device(s) found)", pds.len()))));
            };
            let props = instance.get_physical_device_properties(pd);
            let device_name = props.device_name_as_c_str().map(|c| c.to_string_lossy().into_owned()).unwrap_or_default();
            // A module with OpCapability Int64 (i64 tensors) needs the device's shaderInt64.
            let needs_int64 = words.windows(2).skip(5).any(|w| w[0] == (2 << 16 | 17) && w[1] == 11);
            let have = instance.get_physical_device_features(pd);
            if needs_int64 && have.shader_int64 == vk::FALSE {
                return Err(fail(&instance, VkError(format!("the model computes in 64-bit integers and device '{device_name}' has no shaderInt64"))));
            }
            let features = vk::PhysicalDeviceFeatures::default().shader_int64(needs_int64);
            let prio = [1.0f32];
            let qci = [vk::DeviceQueueCreateInfo::default().queue_family_index(qfi).queue_priorities(&prio)];
            let dci = vk::DeviceCreateInfo::default().queue_create_infos(&qci).enabled_features(&features);
            let device = instance.create_device(pd, &dci, None).map_err(|e| fail(&instance, vkerr("vkCreateDevice")(e)))?;
            let queue = device.get_device_queue(qfi, 0);
            let mem = instance.get_physical_device_memory_properties(pd);
            let mut x = Executor {
                _entry: entry,
                instance,
                device,
                queue,
                bufs: Vec::new(),
                kinds: sched.bases.iter().map(|b| b.0).collect(),
                shader: vk::ShaderModule::null(),
                dsl: vk::DescriptorSetLayout::null(),
                layout: vk::PipelineLayout::null(),
                pipelines: Vec::new(),
                pool: vk::DescriptorPool::null(),
                cmd_pool: vk::CommandPool::null(),
                cmd: vk::CommandBuffer::null(),
                fence: vk::Fence::null(),
                device_name,
                n_inputs: sched.count(|k| matches!(k, BaseKind::Input(_))),
                n_outputs: sched.count(|k| matches!(k, BaseKind::Output(_))),
                device_local: false,
                queries: vk::QueryPool::null(),
                n_queries: 0,
                ns_per_tick: props.limits.timestamp_period as f64,
                order: Vec::new(),
                barriers: 0,
            };
            // (x's Drop destroys whatever was created if a step below fails.)
            let d = x.device.clone();
            // Discrete GPUs: every base in device-local memory; inputs and outputs go through
            // host-visible staging buffers that the recorded command buffer copies, and the weights
            // are uploaded once through a staging buffer. CPU and integrated devices (lavapipe): one
            // host-visible, coherent buffer per base, mapped.
            let host = vk::MemoryPropertyFlags::HOST_VISIBLE | vk::MemoryPropertyFlags::HOST_COHERENT;
            let discrete = matches!(props.device_type, vk::PhysicalDeviceType::DISCRETE_GPU | vk::PhysicalDeviceType::VIRTUAL_GPU);
            let pick_type = |bits: u32, want: vk::MemoryPropertyFlags| (0..mem.memory_type_count).find(|&i| bits & (1 << i) != 0 && mem.memory_types[i as usize].property_flags.contains(want));
            // A buffer with memory of the `want` properties (mapped when host-visible).
            let make = |size: u64, usage: vk::BufferUsageFlags, want: vk::MemoryPropertyFlags| -> Result<(vk::Buffer, vk::DeviceMemory, *mut u8), VkError> {
                let bci = vk::BufferCreateInfo::default().size(size).usage(usage).sharing_mode(vk::SharingMode::EXCLUSIVE);
                let buffer = d.create_buffer(&bci, None).map_err(vkerr("vkCreateBuffer"))?;
                let req = d.get_buffer_memory_requirements(buffer);
                let Some(mt) = pick_type(req.memory_type_bits, want) else {
                    d.destroy_buffer(buffer, None);
                    return Err(VkError(format!("no memory type with properties {:#x} for a storage buffer", want.as_raw())));
                };
                let memory = match d.allocate_memory(&vk::MemoryAllocateInfo::default().allocation_size(req.size).memory_type_index(mt), None) {
                    Ok(m) => m,
                    Err(e) => {
                        d.destroy_buffer(buffer, None);
                        return Err(vkerr("vkAllocateMemory")(e));
                    }
                };
                let mut ptr = core::ptr::null_mut();
                let r = d.bind_buffer_memory(buffer, memory, 0).map_err(vkerr("vkBindBufferMemory"));
                let r = r.and_then(|_| if want.contains(vk::MemoryPropertyFlags::HOST_VISIBLE) { d.map_memory(memory, 0, vk::WHOLE_SIZE, vk::MemoryMapFlags::empty()).map_err(vkerr("vkMapMemory")) } else { Ok(ptr) });
                match r {
                    Ok(p) => ptr = p,
                    Err(e) => {
                        d.destroy_buffer(buffer, None);
                        d.free_memory(memory, None);
                        return Err(e);
                    }
                }
                Ok((buffer, memory, ptr as *mut u8))
            };
            let storage = vk::BufferUsageFlags::STORAGE_BUFFER | vk::BufferUsageFlags::TRANSFER_SRC | vk::BufferUsageFlags::TRANSFER_DST;
            // RLX_VULKAN_MEMORY=staged|host overrides the choice (the staged path can then be tested on
            // lavapipe, and both compared on one GPU).
            let staged = match std::env::var("RLX_VULKAN_MEMORY").as_deref() {
                Ok("staged") => true,
                Ok("host") => false,
                _ => discrete,
            };
            x.device_local = staged && (0..mem.memory_type_count).any(|i| mem.memory_types[i as usize].property_flags.contains(vk::MemoryPropertyFlags::DEVICE_LOCAL));
            let mut weights_staging = None;
            for (kind, bytes) in &sched.bases {
                let size = bytes.div_ceil(4).max(1) * 4;
                if !x.device_local {
                    let (buffer, memory, p) = make(size, storage, host)?;
                    x.bufs.push(Buf { buffer, memory, ptr: p, bytes: *bytes, staging: None });
                    if *kind == BaseKind::Weights && !weights.is_empty() {
                        core::ptr::copy_nonoverlapping(weights.as_ptr(), p, weights.len());
                    }
                    continue;
                }
                let (buffer, memory, _) = make(size, storage, vk::MemoryPropertyFlags::DEVICE_LOCAL)?;
                x.bufs.push(Buf { buffer, memory, ptr: core::ptr::null_mut(), bytes: *bytes, staging: None });
                let b = x.bufs.last_mut().expect("pushed");
                let io = matches!(kind, BaseKind::Input(_) | BaseKind::Output(_));
                if io || (*kind == BaseKind::Weights && !weights.is_empty()) {
                    let (sbuf, smem, p) = make(size, vk::BufferUsageFlags::TRANSFER_SRC | vk::BufferUsageFlags::TRANSFER_DST, host)?;
                    if io {
                        b.staging = Some((sbuf, smem));
                        b.ptr = p;
                    } else {
                        core::ptr::copy_nonoverlapping(weights.as_ptr(), p, weights.len());
                        weights_staging = Some((sbuf, smem, b.buffer, size));
                    }
                }
            }
            x.shader = d.create_shader_module(&vk::ShaderModuleCreateInfo::default().code(words), None).map_err(vkerr("vkCreateShaderModule"))?;
            // Binding i and binding n + i are both buffer i (the second is the atomic view that
            // byte-wide stores use).
            let nb = sched.bases.len();
            let binds: Vec<vk::DescriptorSetLayoutBinding> = (0..2 * nb)
                .map(|i| vk::DescriptorSetLayoutBinding::default().binding(i as u32).descriptor_type(vk::DescriptorType::STORAGE_BUFFER).descriptor_count(1).stage_flags(vk::ShaderStageFlags::COMPUTE))
                .collect();
            x.dsl = d.create_descriptor_set_layout(&vk::DescriptorSetLayoutCreateInfo::default().bindings(&binds), None).map_err(vkerr("vkCreateDescriptorSetLayout"))?;
            let dsls = [x.dsl];
            x.layout = d.create_pipeline_layout(&vk::PipelineLayoutCreateInfo::default().set_layouts(&dsls), None).map_err(vkerr("vkCreatePipelineLayout"))?;
            // One pipeline per distinct entry point, in first-use order.
            let mut entries: Vec<u32> = Vec::new();
            for d in &sched.dispatches {
                if !entries.contains(&d.entry) {
                    entries.push(d.entry);
                }
            }
            for e in &entries {
                let name = std::ffi::CString::new(format!("k{e}")).expect("no NUL");
                let stage = vk::PipelineShaderStageCreateInfo::default().stage(vk::ShaderStageFlags::COMPUTE).module(x.shader).name(&name);
                let ci = [vk::ComputePipelineCreateInfo::default().stage(stage).layout(x.layout)];
                let p = d.create_compute_pipelines(vk::PipelineCache::null(), &ci, None).map_err(|(_, r)| vkerr("vkCreateComputePipelines")(r))?;
                x.pipelines.extend(p);
            }
            let sizes = [vk::DescriptorPoolSize { ty: vk::DescriptorType::STORAGE_BUFFER, descriptor_count: (2 * nb).max(1) as u32 }];
            x.pool = d.create_descriptor_pool(&vk::DescriptorPoolCreateInfo::default().max_sets(1).pool_sizes(&sizes), None).map_err(vkerr("vkCreateDescriptorPool"))?;
            let set = d.allocate_descriptor_sets(&vk::DescriptorSetAllocateInfo::default().descriptor_pool(x.pool).set_layouts(&dsls)).map_err(vkerr("vkAllocateDescriptorSets"))?[0];
            let infos: Vec<[vk::DescriptorBufferInfo; 1]> = x.bufs.iter().map(|b| [vk::DescriptorBufferInfo { buffer: b.buffer, offset: 0, range: vk::WHOLE_SIZE }]).collect();
            let writes: Vec<vk::WriteDescriptorSet> = (0..2 * nb)
                .map(|j| vk::WriteDescriptorSet::default().dst_set(set).dst_binding(j as u32).descriptor_type(vk::DescriptorType::STORAGE_BUFFER).buffer_info(&infos[j % nb]))
                .collect();
            d.update_descriptor_sets(&writes, &[]);
            x.cmd_pool = d.create_command_pool(&vk::CommandPoolCreateInfo::default().queue_family_index(qfi), None).map_err(vkerr("vkCreateCommandPool"))?;
            x.cmd = d
                .allocate_command_buffers(&vk::CommandBufferAllocateInfo::default().command_pool(x.cmd_pool).level(vk::CommandBufferLevel::PRIMARY).command_buffer_count(1))
                .map_err(vkerr("vkAllocateCommandBuffers"))?[0];
            x.fence = d.create_fence(&vk::FenceCreateInfo::default(), None).map_err(vkerr("vkCreateFence"))?;
            if let Some((sbuf, smem, dst, size)) = weights_staging {
                // The weights' one upload: record, submit, wait, then the command buffer is reset and
                // recorded again below.
                let upload = (|| -> Result<(), VkError> {
                    d.begin_command_buffer(x.cmd, &vk::CommandBufferBeginInfo::default().flags(vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT)).map_err(vkerr("vkBeginCommandBuffer"))?;
                    d.cmd_copy_buffer(x.cmd, sbuf, dst, &[vk::BufferCopy { src_offset: 0, dst_offset: 0, size }]);
                    d.end_command_buffer(x.cmd).map_err(vkerr("vkEndCommandBuffer"))?;
                    let cbs = [x.cmd];
                    d.queue_submit(x.queue, &[vk::SubmitInfo::default().command_buffers(&cbs)], x.fence).map_err(vkerr("vkQueueSubmit"))?;
                    d.wait_for_fences(&[x.fence], true, u64::MAX).map_err(vkerr("vkWaitForFences"))?;
                    d.reset_fences(&[x.fence]).map_err(vkerr("vkResetFences"))?;
                    d.reset_command_pool(x.cmd_pool, vk::CommandPoolResetFlags::empty()).map_err(vkerr("vkResetCommandPool"))
                })();
                d.destroy_buffer(sbuf, None);
                d.free_memory(smem, None);
                upload?;
            }
            // Record once: the dispatches level by level (Schedule::levels), a compute→compute
            // barrier between consecutive levels, a barrier to the transfer or host stage at the end.
            let cb = x.cmd;
            d.begin_command_buffer(cb, &vk::CommandBufferBeginInfo::default()).map_err(vkerr("vkBeginCommandBuffer"))?;
            d.cmd_bind_descriptor_sets(cb, vk::PipelineBindPoint::COMPUTE, x.layout, 0, &[set], &[]);
            // Staged inputs: host → device copies first, visible to the first dispatch.
            let mut copied = false;
            for (b, (kind, _)) in x.bufs.iter().zip(&sched.bases) {
                if let (Some((sbuf, _)), BaseKind::Input(_)) = (b.staging, kind) {
                    d.cmd_copy_buffer(cb, sbuf, b.buffer, &[vk::BufferCopy { src_offset: 0, dst_offset: 0, size: b.bytes.div_ceil(4).max(1) * 4 }]);
                    copied = true;
                }
            }
            if copied {
                let mb = [vk::MemoryBarrier::default().src_access_mask(vk::AccessFlags::TRANSFER_WRITE).dst_access_mask(vk::AccessFlags::SHADER_READ | vk::AccessFlags::SHADER_WRITE)];
                d.cmd_pipeline_barrier(cb, vk::PipelineStageFlags::TRANSFER, vk::PipelineStageFlags::COMPUTE_SHADER, vk::DependencyFlags::empty(), &mb, &[], &[]);
            }
            // (A write-after-read needs only the execution dependency the stages give.)
            let between = [vk::MemoryBarrier::default().src_access_mask(vk::AccessFlags::SHADER_WRITE).dst_access_mask(vk::AccessFlags::SHADER_READ | vk::AccessFlags::SHADER_WRITE)];
            // RLX_VULKAN_DISPATCHES=n records only the first n dispatches of the schedule (to find a
            // failing kernel); the levels are those of that prefix.
            let limit = std::env::var("RLX_VULKAN_DISPATCHES").ok().and_then(|v| v.parse().ok()).unwrap_or(usize::MAX);
            sched.dispatches.truncate(limit);
            let levels = sched.levels(how);
            let nd = sched.dispatches.len();
            if std::env::var("RLX_VULKAN_PROFILE").is_ok_and(|v| v == "1") && qf_timestamps(&instance_props(&x.instance, pd, qfi)) {
                x.n_queries = nd as u32 + 1;
                x.queries = d.create_query_pool(&vk::QueryPoolCreateInfo::default().query_type(vk::QueryType::TIMESTAMP).query_count(x.n_queries), None).map_err(vkerr("vkCreateQueryPool"))?;
                d.cmd_reset_query_pool(cb, x.queries, 0, x.n_queries);
                d.cmd_write_timestamp(cb, vk::PipelineStageFlags::BOTTOM_OF_PIPE, x.queries, 0);
            }
            for (li, level) in levels.iter().enumerate() {
                if li > 0 {
                    d.cmd_pipeline_barrier(cb, vk::PipelineStageFlags::COMPUTE_SHADER, vk::PipelineStageFlags::COMPUTE_SHADER, vk::DependencyFlags::empty(), &between, &[], &[]);
                    x.barriers += 1;
                }
                for &di in level {
                    let disp = &sched.dispatches[di];
                    let pi = entries.iter().position(|e| *e == disp.entry).ok_or_else(|| VkError(format!("internal error: no pipeline for k{}", disp.entry)))?;
                    d.cmd_bind_pipeline(cb, vk::PipelineBindPoint::COMPUTE, x.pipelines[pi]);
                    d.cmd_dispatch(cb, disp.groups[0], disp.groups[1], disp.groups[2]);
                    x.order.push(di);
                    if x.n_queries > 0 {
                        d.cmd_write_timestamp(cb, vk::PipelineStageFlags::BOTTOM_OF_PIPE, x.queries, x.order.len() as u32);
                    }
                }
            }
            if x.device_local {
                // Staged outputs: device → host copies after the last dispatch.
                let mb = [vk::MemoryBarrier::default().src_access_mask(vk::AccessFlags::SHADER_WRITE).dst_access_mask(vk::AccessFlags::TRANSFER_READ)];
                d.cmd_pipeline_barrier(cb, vk::PipelineStageFlags::COMPUTE_SHADER, vk::PipelineStageFlags::TRANSFER, vk::DependencyFlags::empty(), &mb, &[], &[]);
                for (b, (kind, _)) in x.bufs.iter().zip(&sched.bases) {
                    if let (Some((sbuf, _)), BaseKind::Output(_)) = (b.staging, kind) {
                        d.cmd_copy_buffer(cb, b.buffer, sbuf, &[vk::BufferCopy { src_offset: 0, dst_offset: 0, size: b.bytes.div_ceil(4).max(1) * 4 }]);
                    }
                }
                let to_host = [vk::MemoryBarrier::default().src_access_mask(vk::AccessFlags::TRANSFER_WRITE).dst_access_mask(vk::AccessFlags::HOST_READ)];
                d.cmd_pipeline_barrier(cb, vk::PipelineStageFlags::TRANSFER, vk::PipelineStageFlags::HOST, vk::DependencyFlags::empty(), &to_host, &[], &[]);
            } else {
                let to_host = [vk::MemoryBarrier::default().src_access_mask(vk::AccessFlags::SHADER_WRITE).dst_access_mask(vk::AccessFlags::HOST_READ)];
                d.cmd_pipeline_barrier(cb, vk::PipelineStageFlags::COMPUTE_SHADER, vk::PipelineStageFlags::HOST, vk::DependencyFlags::empty(), &to_host, &[], &[]);
            }
            d.end_command_buffer(cb).map_err(vkerr("vkEndCommandBuffer"))?;
            Ok(x)
        }
    }

    /// The device's name (e.g. `llvmpipe (LLVM 15.0.6, 256 bits)` for lavapipe).
    pub fn device_name(&self) -> &str {
        &self.device_name
    }

    /// With `RLX_VULKAN_PROFILE=1` at setup (and a queue with timestamps): the last run's time of
    /// each dispatch in µs, by schedule index: the time from the previous recorded dispatch's
    /// timestamp to its own (with barriers only between levels, dispatches of one level overlap and
    /// these times are approximate; `RLX_VULKAN_BARRIERS=all` gives one dispatch at a time). A
    /// dispatch not recorded (`RLX_VULKAN_DISPATCHES`) gets 0.
    pub fn profile(&self) -> Option<Vec<f64>> {
        if self.n_queries == 0 {
            return None;
        }
        let mut t = std::vec![0u64; self.n_queries as usize];
        // SAFETY: the pool holds n_queries timestamps written by the last completed submission.
        unsafe { self.device.get_query_pool_results(self.queries, 0, &mut t, vk::QueryResultFlags::TYPE_64 | vk::QueryResultFlags::WAIT) }.ok()?;
        let mut us = std::vec![0.0; self.order.iter().max().map_or(0, |m| m + 1)];
        for (w, &d) in t.windows(2).zip(&self.order) {
            us[d] = w[1].wrapping_sub(w[0]) as f64 * self.ns_per_tick / 1e3;
        }
        Some(us)
    }

    /// The compute→compute barriers recorded between dispatches (`levels - 1`; `RLX_VULKAN_BARRIERS`).
    pub fn barriers(&self) -> usize {
        self.barriers
    }

    /// The dispatches recorded.
    pub fn dispatches(&self) -> usize {
        self.order.len()
    }

    /// Whether the buffers are in device-local memory with staged input/output copies (discrete
    /// GPUs), rather than host-visible memory mapped directly (CPU and integrated devices).
    pub fn device_local(&self) -> bool {
        self.device_local
    }

    /// Runs the schedule once: `inputs[i]` and `outputs[i]` must be exactly the ports' byte sizes,
    /// in manifest order.
    pub fn run(&mut self, inputs: &[&[u8]], outputs: &mut [&mut [u8]]) -> Result<(), VkError> {
        if inputs.len() != self.n_inputs || outputs.len() != self.n_outputs {
            return Err(VkError(format!("the model takes {} inputs and {} outputs; {} and {} were given", self.n_inputs, self.n_outputs, inputs.len(), outputs.len())));
        }
        for (b, k) in self.bufs.iter().zip(&self.kinds) {
            if let BaseKind::Input(i) = *k {
                let src = inputs.get(i as usize).ok_or_else(|| VkError(format!("input {i} is missing")))?;
                if src.len() as u64 != b.bytes {
                    return Err(VkError(format!("input {i} is {} bytes, the model takes {}", src.len(), b.bytes)));
                }
                // SAFETY: the mapping is at least `b.bytes` long and not aliased by `src`.
                unsafe { core::ptr::copy_nonoverlapping(src.as_ptr(), b.ptr, src.len()) };
            }
            if let BaseKind::Output(i) = *k {
                let n = outputs.get(i as usize).map(|o| o.len()).unwrap_or(0);
                if n as u64 != b.bytes {
                    return Err(VkError(format!("output {i} is {n} bytes, the model writes {}", b.bytes)));
                }
            }
        }
        let cbs = [self.cmd];
        let submit = [vk::SubmitInfo::default().command_buffers(&cbs)];
        // SAFETY: the command buffer was recorded in `new` and is not pending (we wait below).
        unsafe {
            self.device.queue_submit(self.queue, &submit, self.fence).map_err(vkerr("vkQueueSubmit"))?;
            self.device.wait_for_fences(&[self.fence], true, u64::MAX).map_err(vkerr("vkWaitForFences"))?;
            self.device.reset_fences(&[self.fence]).map_err(vkerr("vkResetFences"))?;
        }
        for (b, k) in self.bufs.iter().zip(&self.kinds) {
            if let BaseKind::Output(i) = *k {
                let dst = &mut outputs[i as usize];
                // SAFETY: the mapping holds `b.bytes` == dst.len() bytes written by the device, made
                // visible to the host by the final barrier and the fence.
                unsafe { core::ptr::copy_nonoverlapping(b.ptr, dst.as_mut_ptr(), dst.len()) };
            }
        }
        Ok(())
    }
}

impl Drop for Executor {
    fn drop(&mut self) {
        // SAFETY: all handles were created from this device/instance; the device is idle after the
        // wait, and null handles are ignored by the destroy calls.
        unsafe {
            let d = &self.device;
            let _ = d.device_wait_idle();
            d.destroy_fence(self.fence, None);
            d.destroy_query_pool(self.queries, None);
            d.destroy_command_pool(self.cmd_pool, None);
            d.destroy_descriptor_pool(self.pool, None);
            for p in &self.pipelines {
                d.destroy_pipeline(*p, None);
            }
            d.destroy_pipeline_layout(self.layout, None);
            d.destroy_descriptor_set_layout(self.dsl, None);
            d.destroy_shader_module(self.shader, None);
            for b in &self.bufs {
                d.destroy_buffer(b.buffer, None);
                d.free_memory(b.memory, None);
                if let Some((sb, sm)) = b.staging {
                    d.destroy_buffer(sb, None);
                    d.free_memory(sm, None);
                }
            }
            d.destroy_device(None);
            self.instance.destroy_instance(None);
        }
    }
}

fn instance_props(instance: &ash::Instance, pd: vk::PhysicalDevice, qfi: u32) -> vk::QueueFamilyProperties {
    // SAFETY: a valid physical device of this instance.
    let qf = unsafe { instance.get_physical_device_queue_family_properties(pd) };
    qf[qfi as usize]
}

fn qf_timestamps(q: &vk::QueueFamilyProperties) -> bool {
    q.timestamp_valid_bits > 0
}

/// Just the check: whether a Vulkan loader and a device with a compute queue are present, and the
/// device's name (tests skip with this reason when there is none).
pub fn probe() -> Result<String, VkError> {
    // SAFETY: as in `Executor::new`.
    unsafe {
        let entry = ash::Entry::load().map_err(|e| VkError(format!("no Vulkan loader (libvulkan.so.1): {e}")))?;
        let app = vk::ApplicationInfo::default().api_version(vk::make_api_version(0, 1, 1, 0));
        let instance = entry.create_instance(&vk::InstanceCreateInfo::default().application_info(&app), None).map_err(vkerr("vkCreateInstance"))?;
        let pds = instance.enumerate_physical_devices().unwrap_or_default();
        let mut name = None;
        for pd in pds {
            if instance.get_physical_device_queue_family_properties(pd).iter().any(|f| f.queue_flags.contains(vk::QueueFlags::COMPUTE)) {
                name = Some(instance.get_physical_device_properties(pd).device_name_as_c_str().map(|c| c.to_string_lossy().into_owned()).unwrap_or_default());
                break;
            }
        }
        instance.destroy_instance(None);
        name.ok_or_else(|| VkError("no Vulkan device with a compute queue".into()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::vec;

    fn words(w: &[u32]) -> Vec<u8> {
        w.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    #[test]
    fn schedule_parses_and_rejects_malformed_bytes() {
        // Two bases (arena 64 bytes, input 0 of 16), one dispatch reading input bytes 0..16 and
        // writing arena bytes 8..72 (past 64: bad below) / 8..64.
        let good = words(&[SCHEDULE_MAGIC, 2, 2, 0, 0, 64, 0, 2, 0, 16, 0, 1, 0, 1, 1, 1, 2, 1, 1, 0, 0, 16, 0, 0, 2, 8, 0, 64, 0]);
        let s = Schedule::parse(&good).unwrap();
        assert_eq!(s.bases, vec![(BaseKind::Arena, 64), (BaseKind::Input(0), 16)]);
        let r = |base, access, start, end| Range { base, access, start, end };
        assert_eq!(s.dispatches, vec![Dispatch { entry: 0, groups: [1, 1, 1], block: [0; 3], shared: 0, ranges: vec![r(1, Access::Read, 0, 16), r(0, Access::Write, 8, 64)], comm: None }]);
        for n in 0..good.len() {
            assert!(Schedule::parse(&good[..n]).is_err(), "truncated at {n}");
        }
        let patch = |at: usize, v: u32| {
            let mut w = good.clone();
            w[4 * at..4 * at + 4].copy_from_slice(&v.to_le_bytes());
            Schedule::parse(&w).err().map(|e| e.0).unwrap_or_default()
        };
        assert!(patch(0, 0).contains("bad magic"));
        assert!(patch(3, 9).contains("unknown base kind 9"));
        // Base 1 as a state region (kind 4): it parses; a second one, or one with an index, does not;
        // the Vulkan executor refuses a stateful schedule before loading Vulkan.
        let mut st = good.clone();
        st[4 * 7..4 * 8].copy_from_slice(&4u32.to_le_bytes());
        st[4 * 8..4 * 9].copy_from_slice(&0u32.to_le_bytes());
        assert_eq!(Schedule::parse(&st).unwrap().bases, vec![(BaseKind::Arena, 64), (BaseKind::State, 16)]);
        let e = Executor::new(&[0; 20], &st, &[]).err().unwrap().0;
        assert!(e.contains("keeps state between runs") && e.contains("--target cuda"), "{e}");
        let mut two = st.clone();
        two[4 * 3..4 * 4].copy_from_slice(&4u32.to_le_bytes());
        assert!(Schedule::parse(&two).unwrap_err().0.contains("a second state base"));
        let mut idx = st.clone();
        idx[4 * 8..4 * 9].copy_from_slice(&1u32.to_le_bytes());
        assert!(Schedule::parse(&idx).unwrap_err().0.contains("a state base with an index"));
        assert!(patch(13, 0).contains("zero workgroups"));
        assert!(patch(18, 4).contains("unknown access 4"));
        assert!(patch(17, 2).contains("a range of buffer 2, the schedule has 2"));
        assert!(patch(27, 72).contains("bytes 8..72 of buffer 0, which holds 64"));
        assert!(patch(25, 65).contains("bytes 65..64"));
        assert!(patch(16, u32::MAX).contains("range count exceeds the file"));
        assert!(Schedule::parse(&words(&[SCHEDULE_MAGIC, 2, u32::MAX])).is_err());
        let mut trailing = good.clone();
        trailing.extend([0, 0, 0, 0]);
        assert_eq!(Schedule::parse(&trailing).err().map(|e| e.0).as_deref(), Some("malformed schedule: trailing bytes"));
        // A byte-sized buffer's range may cover its last word whole (byte stores go through words).
        let byte = words(&[SCHEDULE_MAGIC, 2, 1, 0, 0, 5, 0, 1, 0, 1, 1, 1, 1, 0, 2, 0, 0, 8, 0]);
        assert_eq!(Schedule::parse(&byte).unwrap().dispatches[0].ranges, vec![r(0, Access::Write, 0, 8)]);
    }

    #[test]
    fn a_version_1_schedule_is_refused_with_a_clear_error() {
        // Version 1 (rlxc before dispatch ranges): one base, one dispatch, no ranges.
        let v1 = words(&[SCHEDULE_MAGIC, 1, 1, 0, 0, 64, 0, 1, 0, 1, 1, 1]);
        let e = Schedule::parse(&v1).unwrap_err().0;
        assert_eq!(e, "schedule version 1, this runtime reads versions 2 to 5: recompile the model with a matching rlxc");
        assert!(Executor::new(&[0; 20], &v1, &[]).err().map(|e| e.0).unwrap_or_default().contains("schedule version 1"));
    }

    #[test]
    fn executor_rejects_bad_modules_before_touching_vulkan() {
        let sched = words(&[SCHEDULE_MAGIC, 2, 0, 0]);
        assert!(Executor::new(&[1, 2, 3], &sched, &[]).err().map(|e| e.0).unwrap_or_default().contains("multiple of 4"));
        assert!(Executor::new(&[0; 20], &sched, &[]).err().map(|e| e.0).unwrap_or_default().contains("bad magic"));
    }

    const A: u32 = 0; // the arena
    const W: u32 = 1; // the weights
    const R: Access = Access::Read;
    const WR: Access = Access::Write;
    const RW: Access = Access::ReadWrite;

    /// A schedule from dispatches given as lists of (base, access, start, end).
    fn sched(ds: &[&[(u32, Access, u64, u64)]]) -> Schedule {
        let dispatches = ds
            .iter()
            .enumerate()
            .map(|(i, rs)| Dispatch { entry: i as u32, groups: [1, 1, 1], block: [0; 3], shared: 0, ranges: rs.iter().map(|&(base, access, start, end)| Range { base, access, start, end }).collect(), comm: None })
            .collect();
        Schedule { bases: vec![(BaseKind::Arena, 1 << 20), (BaseKind::Weights, 1 << 20)], dispatches }
    }

    fn lv(s: &Schedule) -> Vec<Vec<usize>> {
        s.levels(Barriers::Levels)
    }

    #[test]
    fn barriers_go_exactly_where_a_byte_range_is_shared_with_a_write() {
        // RAW: 1 reads what 0 wrote.
        assert_eq!(lv(&sched(&[&[(A, WR, 0, 64)], &[(A, R, 0, 64), (A, WR, 64, 128)]])), vec![vec![0], vec![1]]);
        // WAR: 1 overwrites bytes 0 reads (0 must finish reading first).
        assert_eq!(lv(&sched(&[&[(W, R, 0, 64), (A, WR, 64, 128)], &[(W, R, 0, 64), (A, WR, 0, 64)]])), vec![vec![0, 1]]);
        assert_eq!(lv(&sched(&[&[(A, R, 0, 64), (A, WR, 64, 128)], &[(A, WR, 0, 64)]])), vec![vec![0], vec![1]]);
        // WAW: both write byte 63.
        assert_eq!(lv(&sched(&[&[(A, WR, 0, 64)], &[(A, WR, 60, 64)]])), vec![vec![0], vec![1]]);
        // ReadWrite counts as a write on either side.
        assert_eq!(lv(&sched(&[&[(A, RW, 0, 4)], &[(A, R, 0, 4)]])), vec![vec![0], vec![1]]);
        assert_eq!(lv(&sched(&[&[(A, R, 0, 4)], &[(A, RW, 0, 4)]])), vec![vec![0], vec![1]]);
        // Reads never conflict with reads.
        assert_eq!(lv(&sched(&[&[(W, R, 0, 64)], &[(W, R, 0, 64)]])), vec![vec![0, 1]]);
        // Disjoint ranges of one buffer (touching ends) do not conflict, nor do the same bytes of
        // two different buffers, nor an empty range.
        assert_eq!(lv(&sched(&[&[(A, WR, 0, 64)], &[(A, WR, 64, 128)], &[(W, R, 0, 64)], &[(A, WR, 32, 32)]])), vec![vec![0, 1, 2, 3]]);
        // The same bytes reached through different bindings: a view (arena 32..64) of a root
        // (arena 0..128) and a buffer placed in reused arena bytes are the same memory.
        assert_eq!(lv(&sched(&[&[(A, WR, 0, 128)], &[(A, R, 32, 64), (A, WR, 256, 320)]])), vec![vec![0], vec![1]]);
        // Arena reuse: 0 writes x (0..64), 1 reads x → y (64..128), 2 puts z in x's old bytes (WAR
        // with 1, WAW with 0), 3 reads y and z.
        let reuse = sched(&[&[(A, WR, 0, 64)], &[(A, R, 0, 64), (A, WR, 64, 128)], &[(W, R, 0, 8), (A, WR, 0, 64)], &[(A, R, 0, 128), (A, WR, 128, 192)]]);
        assert_eq!(lv(&reuse), vec![vec![0], vec![1], vec![2], vec![3]]);
        // MiniLM's Q, K and V projections read the LayerNorm's output and the weights and write three
        // different buffers: one level, then the scores read Q and K, then the context reads V.
        let attn = sched(&[
            &[(A, WR, 0, 64)],
            &[(A, R, 0, 64), (W, R, 0, 64), (A, WR, 64, 128)],
            &[(A, R, 0, 64), (W, R, 64, 128), (A, WR, 128, 192)],
            &[(A, R, 0, 64), (W, R, 128, 192), (A, WR, 192, 256)],
            &[(A, R, 64, 192), (A, WR, 256, 320)],
            &[(A, R, 192, 320), (A, WR, 0, 64)],
        ]);
        assert_eq!(lv(&attn), vec![vec![0], vec![1, 2, 3], vec![4], vec![5]]);
        assert_eq!(attn.levels(Barriers::InOrder), vec![vec![0], vec![1, 2, 3], vec![4], vec![5]]);
        assert_eq!(attn.levels(Barriers::All).len(), 6);
        // Reordering: 2 is independent of 1 (which waits for 0), so it runs beside 0; in schedule
        // order it would wait behind 1's barrier.
        let s = sched(&[&[(A, WR, 0, 64)], &[(A, R, 0, 64), (A, WR, 64, 128)], &[(W, R, 0, 64), (A, WR, 128, 192)]]);
        assert_eq!(lv(&s), vec![vec![0, 2], vec![1]]);
        assert_eq!(s.levels(Barriers::InOrder), vec![vec![0], vec![1, 2]]);
        // A dependency on an earlier level than the previous one is still kept (all pairs are compared).
        let s = sched(&[&[(A, WR, 0, 64)], &[(W, R, 0, 4), (A, WR, 64, 128)], &[(A, R, 64, 128), (A, WR, 128, 192)], &[(A, R, 0, 4), (A, WR, 192, 200)]]);
        assert_eq!(lv(&s), vec![vec![0, 1], vec![2, 3]]);
    }

    #[test]
    fn levels_keep_every_conflicting_pair_ordered_on_random_schedules() {
        // xorshift: deterministic pseudo-random schedules of 40 dispatches over two small buffers.
        let mut x = 0x2545_f491_4f6c_dd1du64;
        let mut rnd = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        for _ in 0..200 {
            let ds: Vec<Vec<(u32, Access, u64, u64)>> = (0..40)
                .map(|_| {
                    (0..1 + rnd(3))
                        .map(|_| {
                            let start = 4 * rnd(16);
                            (rnd(2) as u32, [R, WR, RW][rnd(3) as usize], start, start + 4 * rnd(6))
                        })
                        .collect()
                })
                .collect();
            let refs: Vec<&[(u32, Access, u64, u64)]> = ds.iter().map(|d| d.as_slice()).collect();
            let s = sched(&refs);
            // `conflict` against a byte-by-byte oracle: some byte of one buffer both touch, one writing.
            let touches = |d: &[(u32, Access, u64, u64)], base: u32, byte: u64, write: bool| d.iter().any(|&(b, a, s, e)| b == base && s <= byte && byte < e && (!write || a != R));
            for (d, e) in (0..12).flat_map(|d| (d + 1..12).map(move |e| (d, e))) {
                let oracle = (0..2).any(|b| (0..100).any(|y| (touches(&ds[d], b, y, true) && touches(&ds[e], b, y, false)) || (touches(&ds[d], b, y, false) && touches(&ds[e], b, y, true))));
                assert_eq!(conflict(&s.dispatches[d], &s.dispatches[e]), oracle, "{:?} vs {:?}", ds[d], ds[e]);
            }
            let mut counts = Vec::new();
            for how in [Barriers::Levels, Barriers::InOrder, Barriers::All] {
                let levels = s.levels(how);
                let mut at = vec![usize::MAX; 40];
                for (l, ds) in levels.iter().enumerate() {
                    assert!(!ds.is_empty() && ds.windows(2).all(|w| w[0] < w[1]));
                    for &d in ds {
                        assert_eq!(at[d], usize::MAX, "dispatch {d} scheduled twice");
                        at[d] = l;
                    }
                }
                for d in 0..40 {
                    assert_ne!(at[d], usize::MAX, "dispatch {d} not scheduled");
                    for e in 0..d {
                        if conflict(&s.dispatches[e], &s.dispatches[d]) {
                            assert!(at[e] < at[d], "{how:?}: {e} and {d} conflict but share level {}", at[d]);
                        }
                    }
                    if how != Barriers::Levels && d > 0 {
                        assert!(at[d - 1] <= at[d], "{how:?} reordered {d}");
                    }
                }
                counts.push(levels.len());
            }
            assert!(counts[0] <= counts[1] && counts[1] <= counts[2] && counts[2] == 40, "{counts:?}");
        }
    }
}
