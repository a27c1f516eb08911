// jco bundles policy.ts and its imports into one module before
// componentizing it. The contract's interfaces (`toolgate:policy/…`,
// `wasi:…`) are the component's imports, provided by the host: not modules
// to look for on disk.
export default { external: [/^wasi:/, /^toolgate:/] };
