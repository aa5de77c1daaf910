//! The allocator of the benchmarks: the `cairn` binary's (mimalloc, crates/cairn/src/main.rs), so
//! the figures are what users get. Built with `CAIRN_BENCH_GLIBC=1` in the environment, a
//! benchmark keeps glibc's malloc instead, to compare the two.

use std::alloc::{GlobalAlloc, Layout, System};

use mimalloc::MiMalloc;

const GLIBC: bool = option_env!("CAIRN_BENCH_GLIBC").is_some();

pub struct Allocator;

pub fn name() -> &'static str {
    if GLIBC { "glibc malloc (CAIRN_BENCH_GLIBC)" } else { "mimalloc, as the cairn binary" }
}

// SAFETY: every call goes to one allocator, fixed at compile time, so what one allocates only it
// frees or reallocates.
unsafe impl GlobalAlloc for Allocator {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        unsafe { if GLIBC { System.alloc(layout) } else { MiMalloc.alloc(layout) } }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        unsafe { if GLIBC { System.alloc_zeroed(layout) } else { MiMalloc.alloc_zeroed(layout) } }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { if GLIBC { System.dealloc(ptr, layout) } else { MiMalloc.dealloc(ptr, layout) } }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        unsafe { if GLIBC { System.realloc(ptr, layout, new_size) } else { MiMalloc.realloc(ptr, layout, new_size) } }
    }
}
