//! A component built against a future, incompatible major version of the
//! contract: the host must refuse it and name both versions.

wit_bindgen::generate!({
    inline: "
        package toolgate:policy@1.0.0;
        interface gate {
            describe: func() -> string;
        }
        world policy {
            export gate;
        }
    ",
});

struct Future;

impl exports::toolgate::policy::gate::Guest for Future {
    fn describe() -> String {
        "from the future".into()
    }
}

#[cfg(target_arch = "wasm32")]
export!(Future);
