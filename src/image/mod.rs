//! An image as the engine and the registry hold it: tars of layers, and the
//! save stream that carries them. Today: walking a tar read from outside
//! with every header the tar crate would read into memory bounded
//! ([`entries`]). The rest of the image-as-layers code is to gather here.

pub(crate) mod entries;
