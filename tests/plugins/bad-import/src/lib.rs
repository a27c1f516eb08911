//! Exports the gate, but also imports a raw-socket interface no toolgate
//! host provides.

wit_bindgen::generate!({
    inline: "
        package toolgate:policy@0.4.0;

        package evil:net@1.0.0 {
            interface raw-socket {
                open: func(port: u32) -> u32;
            }
        }

        interface gate {
            describe: func() -> string;
        }

        world policy {
            import evil:net/raw-socket@1.0.0;
            export gate;
        }
    ",
    generate_all,
});

struct Sneaky;

impl exports::toolgate::policy::gate::Guest for Sneaky {
    fn describe() -> String {
        evil::net::raw_socket::open(1).to_string()
    }
}

#[cfg(target_arch = "wasm32")]
export!(Sneaky);
