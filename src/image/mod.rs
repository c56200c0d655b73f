//! An image as the engine and the registry hold it: tars of layers, and the
//! save stream that carries them. Today: walking a tar read from outside
//! with every header the tar crate would read into memory bounded
//! ([`entries`]), walking a `docker save` stream ([`save_stream`]), and
//! the Debian packages an image's dpkg status lists ([`dpkg`]: read by the
//! normaliser's package record and by the SBOM alike).
//! The rest of the image-as-layers code (the normaliser's reader and
//! writer, the SBOM's layer reading, the release's layer copying) is to
//! gather here.

pub(crate) mod dpkg;
pub(crate) mod entries;
pub(crate) mod save_stream;
