//! The allocator's upkeep. `main.rs` makes mimalloc the global allocator (it says why).
//!
//! mimalloc gives freed memory back to the OS after a delay (mimalloc 2's defaults: 10 ms for
//! pages, 100 ms for whole segments), and only from inside its own calls: what was freed just
//! before the threads that freed it went quiet stays resident until one of them allocates
//! again. So the flusher calls [`release_freed`] when nothing is due (and once a second while
//! something always is), and an embedded range reader when it returns. Without these calls, a
//! load followed by range queries peaked while the queries ran, above the load's own peak; with
//! them the peak stays the load's.
//!
//! The one module that may use `unsafe` (the workspace's lints deny it elsewhere): mimalloc's
//! own entry points are C functions.
#![allow(unsafe_code)]

/// Gives back to the OS what mimalloc has freed and kept past its delay: a walk of the calling
/// thread's heap and the purges due in its arenas. For a thread about to wait. With another
/// global allocator (the test binaries) it tidies mimalloc's unused heap, which costs nothing.
pub fn release_freed() {
    // SAFETY: takes no pointers; any thread may call it at any time.
    unsafe { libmimalloc_sys::mi_collect(false) }
}
