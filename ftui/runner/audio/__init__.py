"""Audio on the torch side (Qwen2-Audio): decoding and resampling as LLaMA-Factory 0.9.5's
``_regularize_audios`` does (``decode``, ``resample``), and its Qwen2AudioPlugin's features and
placeholder expansion (``encode``)."""
