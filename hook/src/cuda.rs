//! The few CUDA driver and NVML types the hook touches, declared by layout.
//!
//! Results crossing the hook are plain `u32`s: a driver may return codes this build does not
//! know, and an unknown value in a Rust enum would be undefined behaviour.

#![allow(non_camel_case_types)]

use std::ffi::c_void;

/// `CUresult`.
pub type CUresult = u32;
pub const CUDA_SUCCESS: CUresult = 0;
/// `cuEventQuery`'s "not yet".
pub const CUDA_NOT_READY: CUresult = 600;
pub const CUDA_ERROR_OUT_OF_MEMORY: CUresult = 2;
pub const CUDA_ERROR_NOT_INITIALIZED: CUresult = 3;
/// Returned by `cuInit` when the daemon refused this process or when no daemon runs and
/// `GPUSHARE_NO_DAEMON=refuse`.
pub const CUDA_ERROR_NOT_PERMITTED: CUresult = 800;
pub const CUDA_ERROR_UNKNOWN: CUresult = 999;

/// `nvmlReturn_t`.
pub type nvmlReturn_t = u32;
pub const NVML_SUCCESS: nvmlReturn_t = 0;
pub const NVML_ERROR_UNINITIALIZED: nvmlReturn_t = 1;

pub type CUdevice = i32;
pub type CUdeviceptr = u64;
pub type CUstream = *mut c_void;
pub type CUevent = *mut c_void;
pub type CUcontext = *mut c_void;
pub type CUfunction = *mut c_void;
pub type CUgraphExec = *mut c_void;
pub type CUmemoryPool = *mut c_void;
pub type CUarray = *mut c_void;
pub type CUmipmappedArray = *mut c_void;
pub type CUmemGenericAllocationHandle = u64;
pub type nvmlDevice_t = *mut c_void;

/// The calling thread's per-thread default stream, as a stream handle.
pub const CU_STREAM_PER_THREAD: usize = 0x2;
pub const CU_EVENT_DISABLE_TIMING: u32 = 0x2;
/// `CU_STREAM_CAPTURE_STATUS_NONE`.
pub const CU_STREAM_CAPTURE_STATUS_NONE: u32 = 0;
/// `CU_STREAM_CAPTURE_MODE_RELAXED`.
pub const CU_STREAM_CAPTURE_MODE_RELAXED: u32 = 2;
/// `CU_MEM_LOCATION_TYPE_DEVICE`.
pub const CU_MEM_LOCATION_TYPE_DEVICE: u32 = 1;

/// `CUlaunchConfig` (CUDA 12+).
#[repr(C)]
pub struct CUlaunchConfig {
    pub grid_dim: [u32; 3],
    pub block_dim: [u32; 3],
    pub shared_mem_bytes: u32,
    pub h_stream: CUstream,
    pub attrs: *mut c_void,
    pub num_attrs: u32,
}

/// `CUmemAllocationProp`, as far as the hook reads it.
#[repr(C)]
pub struct CUmemAllocationProp {
    pub alloc_type: u32,
    pub requested_handle_types: u32,
    pub location_type: u32,
    pub location_id: i32,
}

/// `CUDA_ARRAY_DESCRIPTOR`.
#[repr(C)]
pub struct CudaArrayDescriptor {
    pub width: usize,
    pub height: usize,
    pub format: u32,
    pub num_channels: u32,
}

/// `CUDA_ARRAY3D_DESCRIPTOR`.
#[repr(C)]
pub struct CudaArray3dDescriptor {
    pub width: usize,
    pub height: usize,
    pub depth: usize,
    pub format: u32,
    pub num_channels: u32,
    pub flags: u32,
}

/// `nvmlMemory_t`.
#[repr(C)]
pub struct NvmlMemory {
    pub total: u64,
    pub free: u64,
    pub used: u64,
}

/// `nvmlMemory_v2_t`.
#[repr(C)]
pub struct NvmlMemoryV2 {
    pub version: u32,
    pub total: u64,
    pub reserved: u64,
    pub free: u64,
    pub used: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    #[test]
    fn layouts_match_the_c_headers() {
        assert_eq!(offset_of!(CUlaunchConfig, h_stream), 32);
        assert_eq!(size_of::<CUlaunchConfig>(), 56);
        assert_eq!(offset_of!(CUmemAllocationProp, location_type), 8);
        assert_eq!(size_of::<CudaArrayDescriptor>(), 24);
        assert_eq!(size_of::<CudaArray3dDescriptor>(), 40);
        assert_eq!(offset_of!(NvmlMemoryV2, total), 8);
        assert_eq!(size_of::<NvmlMemoryV2>(), 40);
    }
}
