//! Which SIMD code path the kernels take: detected once, lowered on request.
//!
//! Every tier computes the same bits (the kernels fix their reduction
//! order), so the tier changes only the speed. `POOL_SIMD_TIER` forces a
//! lower tier for debugging or for measuring what a wider one buys
//! (`portable`, `avx2`, `avx512`, `neon`); a value that does not parse, or
//! names a tier this CPU lacks, is logged and ignored.

use std::fmt;
use std::sync::atomic::{AtomicU8, Ordering};

/// The environment variable that lowers the tier.
pub const SIMD_TIER_ENV: &str = "POOL_SIMD_TIER";

/// A SIMD code path of the kernels, from narrowest to widest.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum SimdTier {
    /// Plain Rust, any CPU.
    Portable,
    /// aarch64 NEON (f32: 4-lane FMA; Q8_0 and Q4_0: `sdot` where the CPU
    /// has the dot-product extension, else widening multiplies).
    Neon,
    /// x86_64 AVX2 + FMA + F16C (f32: 8-lane FMA; Q8_0: `maddubs`).
    Avx2,
    /// x86_64 AVX-512 F/BW/DQ/VL + the AVX2 tier's features (f32: 16-lane
    /// FMA, two rows per pass).
    Avx512,
}

impl SimdTier {
    /// The name `POOL_SIMD_TIER` takes and reports print.
    pub fn name(self) -> &'static str {
        match self {
            SimdTier::Portable => "portable",
            SimdTier::Neon => "neon",
            SimdTier::Avx2 => "avx2",
            SimdTier::Avx512 => "avx512",
        }
    }

    /// Parses a tier name (as [`SimdTier::name`] prints it).
    pub fn parse(name: &str) -> Option<SimdTier> {
        Some(match name.trim().to_ascii_lowercase().as_str() {
            "portable" | "scalar" => SimdTier::Portable,
            "neon" => SimdTier::Neon,
            "avx2" => SimdTier::Avx2,
            "avx512" | "avx-512" => SimdTier::Avx512,
            _ => return None,
        })
    }

    /// Whether this CPU can run the tier.
    pub fn is_available(self) -> bool {
        match self {
            SimdTier::Portable => true,
            #[cfg(target_arch = "aarch64")]
            SimdTier::Neon => std::arch::is_aarch64_feature_detected!("neon"),
            #[cfg(target_arch = "x86_64")]
            SimdTier::Avx2 => {
                std::arch::is_x86_feature_detected!("avx2")
                    && std::arch::is_x86_feature_detected!("fma")
                    && std::arch::is_x86_feature_detected!("f16c")
            }
            #[cfg(target_arch = "x86_64")]
            SimdTier::Avx512 => {
                SimdTier::Avx2.is_available()
                    && std::arch::is_x86_feature_detected!("avx512f")
                    && std::arch::is_x86_feature_detected!("avx512bw")
                    && std::arch::is_x86_feature_detected!("avx512dq")
                    && std::arch::is_x86_feature_detected!("avx512vl")
            }
            #[allow(unreachable_patterns)]
            _ => false,
        }
    }

    /// Every tier this CPU can run, narrowest first.
    pub fn available() -> Vec<SimdTier> {
        [
            SimdTier::Portable,
            SimdTier::Neon,
            SimdTier::Avx2,
            SimdTier::Avx512,
        ]
        .into_iter()
        .filter(|t| t.is_available())
        .collect()
    }

    /// The widest tier this CPU can run.
    pub fn detected() -> SimdTier {
        *SimdTier::available()
            .last()
            .expect("portable is always available")
    }
}

impl fmt::Display for SimdTier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Whether the AVX-512 tier's quantized kernels can use VNNI
/// (`vpdpbusd`): the tier plus `avx512vnni`. Without it they run the AVX2
/// kernels.
pub(crate) fn has_avx512_vnni() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        SimdTier::Avx512.is_available() && std::arch::is_x86_feature_detected!("avx512vnni")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Whether the AVX-512 tier's Q4_0 kernel can run on full 512-bit
/// registers: VNNI plus `avx512vbmi` (the byte permute that gathers four
/// blocks' nibbles) and `gfni` (the high nibbles in one instruction);
/// every CPU with VBMI so far has GFNI too. Without them, VNNI on 256-bit
/// registers.
pub(crate) fn has_avx512_vbmi() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        has_avx512_vnni()
            && std::arch::is_x86_feature_detected!("avx512vbmi")
            && std::arch::is_x86_feature_detected!("gfni")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Whether the NEON tier's quantized kernels can use the dot-product
/// extension (`sdot`): the tier plus `dotprod`. Without it they use
/// widening multiplies.
pub(crate) fn has_neon_dotprod() -> bool {
    #[cfg(target_arch = "aarch64")]
    {
        SimdTier::Neon.is_available() && std::arch::is_aarch64_feature_detected!("dotprod")
    }
    #[cfg(not(target_arch = "aarch64"))]
    {
        false
    }
}

/// The quantized kernels' code path under `tier` on this CPU: `scalar`,
/// `neon`, `neon-dotprod`, `avx2`, `avx512bw` (no VNNI: Q4_0 on 512-bit
/// `maddubs`, Q8_0 on the AVX2 kernel), `avx512-vnni` (`vpdpbusd` on
/// 256-bit registers) or `avx512-vbmi` (VNNI, and Q4_0 on full 512-bit
/// registers by VBMI's byte permute). For reports; the f32 kernel is the
/// tier's.
pub fn quantized_kernel_name(tier: SimdTier) -> &'static str {
    match tier {
        SimdTier::Avx512 if has_avx512_vbmi() => "avx512-vbmi",
        SimdTier::Avx512 if has_avx512_vnni() => "avx512-vnni",
        SimdTier::Avx512 => "avx512bw",
        SimdTier::Avx2 => "avx2",
        SimdTier::Neon if has_neon_dotprod() => "neon-dotprod",
        SimdTier::Neon => "neon",
        SimdTier::Portable => "scalar",
    }
}

/// The tier the kernels use: [`SimdTier::detected`], or the lower one
/// `POOL_SIMD_TIER` names. Decided once per process.
pub fn simd_tier() -> SimdTier {
    // An atomic, not a `OnceLock`: a fork while another thread initialises
    // a `OnceLock` leaves it "running" in the child for ever. Racing first
    // calls compute the same tier. 0: not decided yet.
    static TIER: AtomicU8 = AtomicU8::new(0);
    const TIERS: [SimdTier; 4] = [
        SimdTier::Portable,
        SimdTier::Neon,
        SimdTier::Avx2,
        SimdTier::Avx512,
    ];
    match TIER.load(Ordering::Relaxed) {
        0 => {
            let tier = tier_from(
                std::env::var(SIMD_TIER_ENV).ok().as_deref(),
                SimdTier::detected(),
            );
            let code = TIERS.iter().position(|&t| t == tier).expect("listed") as u8 + 1;
            TIER.store(code, Ordering::Relaxed);
            tier
        }
        code => TIERS[usize::from(code - 1)],
    }
}

/// The tier for a `POOL_SIMD_TIER` value (`None`: unset) on a CPU whose
/// widest tier is `detected`.
fn tier_from(requested: Option<&str>, detected: SimdTier) -> SimdTier {
    let Some(value) = requested.filter(|v| !v.trim().is_empty()) else {
        return detected;
    };
    match SimdTier::parse(value) {
        Some(tier) if tier.is_available() && tier <= detected => tier,
        Some(tier) => {
            pool_topo::warn_env(
                SIMD_TIER_ENV,
                value,
                format_args!(
                    "{SIMD_TIER_ENV}={value}: this CPU cannot run {tier}; using {detected}"
                ),
            );
            detected
        }
        None => {
            pool_topo::warn_env(
                SIMD_TIER_ENV,
                value,
                format_args!(
                    "{SIMD_TIER_ENV}={value} is not a tier (portable, neon, avx2, avx512); using {detected}"
                ),
            );
            detected
        }
    }
}

/// Defines `fn $name($args) -> $ret` that runs `$body($args)` compiled for
/// the widest x86 tier [`simd_tier`] allows (AVX-512 or AVX2), else as
/// written. The same Rust code with wider registers: the compiler
/// vectorizes it without changing one floating-point result (no fast-math,
/// no contraction into FMA), so every tier gives the same bits. For loops
/// written to vectorize that a baseline x86-64 build would run on SSE2:
/// the activation quantizers' AVX2 path and the activation's per-block
/// sums, once per input vector on the caller while the workers wait.
macro_rules! widest_tier {
    ($(#[$meta:meta])* $vis:vis fn $name:ident($($arg:ident: $ty:ty),*) -> $ret:ty = $body:path;) => {
        $(#[$meta])*
        $vis fn $name($($arg: $ty),*) -> $ret {
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512dq,avx512vl")]
                fn avx512($($arg: $ty),*) -> $ret {
                    $body($($arg),*)
                }
                #[target_feature(enable = "avx2,fma,f16c")]
                fn avx2($($arg: $ty),*) -> $ret {
                    $body($($arg),*)
                }
                match $crate::tier::simd_tier() {
                    // SAFETY: `simd_tier` returns a tier only when the CPU
                    // has its features (`SimdTier::is_available`).
                    $crate::tier::SimdTier::Avx512 => return unsafe { avx512($($arg),*) },
                    // SAFETY: as above.
                    $crate::tier::SimdTier::Avx2 => return unsafe { avx2($($arg),*) },
                    _ => {}
                }
            }
            $body($($arg),*)
        }
    };
}
pub(crate) use widest_tier;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unset_or_empty_variable_keeps_the_detected_tier() {
        let detected = SimdTier::detected();
        assert_eq!(tier_from(None, detected), detected);
        assert_eq!(tier_from(Some(" "), detected), detected);
    }

    #[test]
    fn the_variable_lowers_the_tier_and_never_raises_it() {
        let detected = SimdTier::detected();
        assert_eq!(tier_from(Some("portable"), detected), SimdTier::Portable);
        assert_eq!(tier_from(Some("PORTABLE"), detected), SimdTier::Portable);
        // A tier wider than the detected one (or absent) is ignored.
        assert_eq!(
            tier_from(Some("avx512"), SimdTier::Portable),
            SimdTier::Portable
        );
        assert_eq!(tier_from(Some("sse9"), detected), detected);
    }

    #[test]
    fn names_round_trip() {
        for tier in [
            SimdTier::Portable,
            SimdTier::Neon,
            SimdTier::Avx2,
            SimdTier::Avx512,
        ] {
            assert_eq!(SimdTier::parse(tier.name()), Some(tier));
        }
    }
}
