"""The images of vision-language records, encoded as LLaMA-Factory 0.9.5's multimodal plugins
encode them (``data/mm_plugin.py``), for the families of ``ftui.presets.vision_families``.

- ``images``: each image opened and regularised (LLaMA-Factory's ``_preprocess_image``: the
  ``image_max_pixels`` / ``image_min_pixels`` resize, RGB; Qwen2-VL's own minimum side and
  aspect-ratio limits);
- ``processor``: the model's image processor (``AutoImageProcessor``, never ``AutoProcessor``:
  transformers cannot build a Qwen2-VL Processor without torchvision, and ftui needs none of it)
  and the run's image settings;
- ``plugins``: the plugin of each LLaMA-Factory name (``qwen2_vl``, ``qwen3_vl``): the
  processor's tensors for a record's images and the ``<image>`` placeholder expansion;
- ``encode``: a record with images through the plugin and the template to an ``Example`` whose
  ``media`` holds its image files and their grids (where a record's image files are:
  ``ftui.data.media``);
- ``batch_images``: those files opened, regularised and processed per micro batch, in the
  collator (``ftui.runner.media_batch``), their grids checked against the encoded ones.
"""
