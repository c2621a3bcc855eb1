//! How programs reach driver functions: `dlsym` and `cuGetProcAddress`.

pub mod dlsym;
pub mod proc_address;
