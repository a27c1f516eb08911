//! A component of the right package that forgot to export the gate: the host
//! must refuse it and say which export is missing.

wit_bindgen::generate!({
    inline: "
        package toolgate:policy@0.4.0;
        interface verdict {
            parse: func(raw: string) -> bool;
        }
        world policy {
            export verdict;
        }
    ",
});

struct Gateless;

impl exports::toolgate::policy::verdict::Guest for Gateless {
    fn parse(raw: String) -> bool {
        raw.is_empty()
    }
}

#[cfg(target_arch = "wasm32")]
export!(Gateless);
