//! The OpenMP peer: llama2.c's forward pass in C (`c/llama2_omp.c`, built
//! by `build.rs` with `-Ofast -march=native -fopenmp`), decoding the same
//! weights the pool's decoder reads.

use pool_llama::Model as Llama2;

/// `Ok` when the C peer was built; else why not (no compiler, no libgomp,
/// a cross build).
pub fn status() -> Result<(), &'static str> {
    match env!("POOL_OPENMP_STATUS") {
        "built" => Ok(()),
        reason => Err(reason),
    }
}

#[cfg(pool_openmp)]
mod ffi {
    use std::ffi::{c_double, c_int, c_void};

    extern "C" {
        pub(super) fn omp_llama2_new(header: *const c_int, weights: *const f32) -> *mut c_void;
        pub(super) fn omp_llama2_generate(
            model: *mut c_void,
            steps: c_int,
            threads: c_int,
            tokens: *mut c_int,
            after_first: *mut c_double,
        ) -> c_int;
        pub(super) fn omp_llama2_free(model: *mut c_void);
    }
}

/// llama2.c's decoder over a [`Llama2`]'s weights (borrowed, not copied).
#[derive(Debug)]
pub struct OpenMpLlama2<'a> {
    #[cfg(pool_openmp)]
    state: std::ptr::NonNull<std::ffi::c_void>,
    model: &'a Llama2,
}

impl<'a> OpenMpLlama2<'a> {
    /// Its state (activations, KV cache) for `model`.
    pub fn new(model: &'a Llama2) -> Result<OpenMpLlama2<'a>, String> {
        status().map_err(str::to_string)?;
        #[cfg(pool_openmp)]
        {
            let header = model
                .config()
                .header()
                .ok_or("a size does not fit the C peer's int")?;
            let values = model
                .llama2c_values()
                .ok_or("the C peer reads llama2.c checkpoints only")?;
            // SAFETY: `header` is 7 ints; the weights are the checkpoint's
            // values after the header, in the layout llama2.c reads, and
            // outlive the returned value (it borrows `model`).
            let state = unsafe { ffi::omp_llama2_new(header.as_ptr(), values.as_ptr()) };
            let state = std::ptr::NonNull::new(state).ok_or("the C peer refused the model")?;
            Ok(OpenMpLlama2 { state, model })
        }
        #[cfg(not(pool_openmp))]
        {
            let _ = model;
            unreachable!("status() is Ok only when the peer was built")
        }
    }

    /// Greedy decoding from BOS on `threads` OpenMP threads: tokens/s
    /// after the first token, and the tokens.
    pub fn generate(&mut self, steps: usize, threads: usize) -> (f64, Vec<u32>) {
        let steps = steps.min(self.model.config().seq_len);
        let mut tokens = vec![0i32; steps];
        let mut after_first = 0.0f64;
        #[cfg(pool_openmp)]
        {
            // SAFETY: `state` came from `omp_llama2_new` and is used by one
            // thread at a time (`&mut self`); `tokens` holds `steps` ints.
            unsafe {
                ffi::omp_llama2_generate(
                    self.state.as_ptr(),
                    steps as i32,
                    threads.max(1) as i32,
                    tokens.as_mut_ptr(),
                    &mut after_first,
                )
            };
        }
        #[cfg(not(pool_openmp))]
        let _ = threads;
        let rate = if steps > 1 && after_first > 0.0 {
            (steps - 1) as f64 / after_first
        } else {
            0.0
        };
        (rate, tokens.into_iter().map(|t| t as u32).collect())
    }
}

#[cfg(pool_openmp)]
impl Drop for OpenMpLlama2<'_> {
    fn drop(&mut self) {
        // SAFETY: from `omp_llama2_new`, freed once, here.
        unsafe { ffi::omp_llama2_free(self.state.as_ptr()) };
    }
}
