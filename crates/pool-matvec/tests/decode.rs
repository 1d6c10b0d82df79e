//! The synthetic decode step gives the same bits on every executor.

use pool_core::Pool;
use pool_matvec::decode::{DecodeConfig, DecodeModel, Serial, WeightFormat};
use testkit::watched;

#[test]
#[cfg_attr(
    miri,
    ignore = "millions of interpreted multiplies; its kernels run under Miri in kernels.rs"
)]
fn decode_logits_are_bit_identical_serial_and_on_pools_of_any_width() {
    watched("decode", |stage| {
        let config = DecodeConfig {
            dim: 128,
            hidden: 256,
            layers: 2,
            vocab: 1000,
        };
        assert_eq!(config.row_jobs_per_token(), 9);
        for format in WeightFormat::ALL {
            let model = DecodeModel::random(config, format, 7);
            let serial: Vec<u32> = model
                .decode(&Serial, 3)
                .iter()
                .map(|v| v.to_bits())
                .collect();
            for workers in 1..=3 {
                stage.set(format!("{format:?} on {workers} workers"));
                let pool = Pool::with_spin(workers, 1000);
                let pooled: Vec<u32> = model.decode(&pool, 3).iter().map(|v| v.to_bits()).collect();
                assert_eq!(pooled, serial, "{format:?} with {workers} workers");
                let phased: Vec<u32> = model
                    .decode_phased(&pool, 3)
                    .iter()
                    .map(|v| v.to_bits())
                    .collect();
                assert_eq!(phased, serial, "{format:?} phased, {workers} workers");
            }
            // A caller-only pool runs the phased token inline.
            let alone = Pool::with_spin(0, 0);
            let inline: Vec<u32> = model
                .decode_phased(&alone, 3)
                .iter()
                .map(|v| v.to_bits())
                .collect();
            assert_eq!(inline, serial, "{format:?} phased inline");
        }
    });
}

/// Small enough for Miri: the phased token's shared outputs (written in
/// grains, read whole after each barrier) checked for aliasing and races.
#[test]
fn a_phased_token_equals_the_fork_join_token_bit_for_bit() {
    watched("decode_phased", |_| {
        let config = DecodeConfig {
            dim: 32,
            hidden: 64,
            layers: 1,
            vocab: 40,
        };
        let model = DecodeModel::random(config, WeightFormat::F32, 3);
        let serial = model.decode(&Serial, 2);
        let pool = Pool::with_spin(2, 1000);
        let phased = model.decode_phased(&pool, 2);
        assert_eq!(
            phased.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            serial.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
        );
    });
}
