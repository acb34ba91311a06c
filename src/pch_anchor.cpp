// The translation unit that t5scale_torch_pch compiles its precompiled header (pch.h) for.
