//! The ini configuration file: any text gives a configuration (with
//! warnings) or an error naming what is wrong, never a panic.
#![no_main]

use lavinmq::config::Config;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = Config::from_ini_str(text);
    }
});
