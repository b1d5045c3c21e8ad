"""The conversation store: content written once, by the activities that produce it, and read
back by key (the SHA-256 of its bytes). Model activities then carry references plus what is
new instead of the whole conversation, so workflow history stays small whatever the context
size. ``files`` is the embedded default (a directory beside the dev server's data)."""
