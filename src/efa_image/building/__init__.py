"""Building images: base images, the build pipeline, Packer, the build cache, fingerprints, push."""
