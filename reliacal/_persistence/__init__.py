"""Private parts of :mod:`reliacal.persistence`: the files, the value codec, the networks."""
