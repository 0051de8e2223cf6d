"""Model zoo (AlexNet, VGG-16, ResNet-18/50, MobileNetV2; ViT-tiny, GPT-tiny), ONNX training export and ORT training artifacts."""

from .zoo import MODEL_NAMES, TRANSFORMER_NAMES, build_model, canonical_name, count_parameters, list_models, min_image_size

__all__ = ["MODEL_NAMES", "TRANSFORMER_NAMES", "build_model", "canonical_name", "count_parameters", "list_models", "min_image_size"]
