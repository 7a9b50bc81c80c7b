//! Re-encodes an `OCLM` model file compactly (varint index deltas,
//! bfloat16 weights): `cargo run -p opencouch-learn --example reencode -- IN OUT`.
//! Decoding a version-1 file and encoding it compactly gives the same bytes
//! as training with `encode_compact` at the same prune threshold.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [input, output] = args.as_slice() else {
        return Err("usage: reencode IN OUT".into());
    };
    let model = opencouch_learn::LinearModel::decode(&std::fs::read(input)?)?;
    let bytes = model.encode_compact(0.0);
    std::fs::write(output, &bytes)?;
    println!("{input} -> {output}: {} bytes", bytes.len());
    Ok(())
}
