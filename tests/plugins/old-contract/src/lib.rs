//! A component built against contract 0.1, which this host no longer
//! loads: the host must refuse it, name both versions and point to the
//! migration notes.

wit_bindgen::generate!({
    inline: "
        package toolgate:policy@0.1.0;
        interface gate {
            configure: func(config: string) -> result<_, string>;
        }
        world policy {
            export gate;
        }
    ",
});

struct Old;

impl exports::toolgate::policy::gate::Guest for Old {
    fn configure(_config: String) -> Result<(), String> {
        Ok(())
    }
}

#[cfg(target_arch = "wasm32")]
export!(Old);
