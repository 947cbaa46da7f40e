"""The operators a candidate model may use: one explicit allowlist for TorchScript code and ``.pt2`` graphs.

Derived from what honest models serialise — the built-in ``mlp``, ``cnn`` and ``resnet18-slim``,
scripted and traced, a ``torch.export`` of each, and torch's own layers scripted (BatchNorm, LayerNorm,
GroupNorm, Dropout, pooling, upsampling, activations, softmax, LSTM/GRU/RNN, multi-head attention,
transformer encoder layers, embeddings) — plus the tensor maths such models are written with. Every
name here computes on tensors and numbers only; nothing reads or writes a file, starts a process, loads
a library or prints. A name missing from the list is refused by name, so a legitimate model that needs
one more operator gets an error that says which.
"""

from __future__ import annotations


def _names(text: str) -> frozenset[str]:
    return frozenset(text.split())


# aten operators (``torch.<name>`` in TorchScript code, ``torch.ops.aten.<name>.<overload>`` in a .pt2).
ATEN_OPS = _names(
    """
    abs abs_ absolute acos acosh adaptive_avg_pool1d adaptive_avg_pool2d adaptive_avg_pool3d
    adaptive_max_pool1d adaptive_max_pool2d adaptive_max_pool3d add add_ addcdiv addcmul addmm alias
    all allclose amax amin any arange argmax argmin as_strided asin asinh atan atan2 atanh avg_pool1d
    avg_pool2d avg_pool3d baddbmm batch_norm bernoulli bitwise_and bitwise_not bitwise_or bitwise_xor
    bmm broadcast_tensors broadcast_to cat ceil celu celu_ chunk clamp clamp_ clamp_max clamp_min clip
    clone contiguous conv1d conv2d conv3d conv_transpose1d conv_transpose2d conv_transpose3d
    convolution _convolution copy copy_ cos cosh cosine_similarity cross cumprod cumsum detach diag
    diagonal dim div div_ dot dropout dropout_ einsum elu elu_ embedding empty empty_like eq equal erf
    exp exp_ expand expand_as expm1 eye feature_dropout feature_dropout_ fill fill_ flatten flip floor
    floor_divide floordiv fmod frac full full_like gather ge gelu gelu_ glu group_norm gt hardshrink
    hardsigmoid hardsigmoid_ hardswish hardswish_ hardtanh hardtanh_ index index_add index_copy
    index_fill index_put index_put_ index_select instance_norm is_floating_point isfinite isinf isnan
    item layer_norm le leaky_relu leaky_relu_ lerp linear log log10 log1p log2 log_softmax logical_and
    logical_not logical_or logical_xor logsigmoid logsumexp lt masked_fill masked_fill_ masked_select
    matmul max max_pool1d max_pool2d max_pool2d_with_indices max_pool3d maximum mean median min minimum
    mish mm mul mul_ mv nan_to_num narrow native_batch_norm native_layer_norm ne neg neg_ new_empty
    new_full new_ones new_zeros nonzero norm normal numel ones ones_like pad permute pixel_shuffle
    pixel_unshuffle pow pow_ prelu prod rand rand_like randn randn_like reciprocal relu relu6 relu_
    remainder repeat repeat_interleave reshape reshape_as round rsqrt rsub scalar_tensor
    scaled_dot_product_attention scatter scatter_add select selu selu_ sigmoid sigmoid_ sign silu silu_
    sin sinh size slice softmax
    softplus softshrink sort split split_with_sizes sqrt square squeeze squeeze_ stack std sub sub_ sum
    sym_constrain_range_for_size sym_numel sym_size sym_storage_offset sym_stride t tan tanh tanh_
    tensor tensor_split threshold threshold_ to topk transpose triu tril type_as unbind unflatten
    unsqueeze unsqueeze_ upsample_bicubic2d upsample_bilinear2d upsample_linear1d upsample_nearest1d
    upsample_nearest2d upsample_nearest3d upsample_trilinear3d _upsample_bicubic2d_aa
    _upsample_bilinear2d_aa _upsample_lanczos2d_aa _upsample_nearest_exact1d _upsample_nearest_exact2d
    _upsample_nearest_exact3d var view view_as where zeros zeros_like _assert_scalar
    _assert_tensor_metadata _to_copy _log_softmax _softmax _native_batch_norm_legit_no_training
    lstm gru rnn_tanh rnn_relu lstm_cell gru_cell rnn_tanh_cell rnn_relu_cell bilinear mish_ im2col col2im
    is_grad_enabled _native_multi_head_attention _transformer_encoder_layer_fwd
    """
)

# TorchScript builtins that serialised code spells ``torch.<name>``: list, dict, string and number
# helpers of the TorchScript runtime (``aten::len``, ``aten::__is__``, ``aten::warn`` …).
TORCHSCRIPT_BUILTINS = _names(
    """
    __and__ __contains__ __derive_index __getitem__ __interpolate __is__ __isnot__ __not__ __or__
    __range_length __round_to_zero_floordiv __upsample __upsample_bilinear __xor__ append clear
    extend format insert items keys len list pop values warn device dtype layout get setdefault
    copysign factorial gcd isfinite mathremainder modf degrees radians ceil floor trunc
    """
)

# ``ops.prim.<name>`` in TorchScript code.
PRIM_OPS = _names(
    """
    RaiseException NumToTensor device dtype is_cuda is_cpu layout min max shape data unchecked_cast
    unchecked_unwrap_optional isinstance requires_grad grad is_quantized is_meta is_sparse is_mkldnn
    is_vulkan is_xpu is_mps itemsize element_size abs AutogradZero TupleIndex ListConstruct
    TupleConstruct DictConstruct type is_nested
    """
)

# Python ``operator`` functions a .pt2 graph may call on symbolic sizes (target ``_operator.<name>``).
OPERATOR_FUNCTIONS = _names(
    "getitem add sub mul floordiv truediv mod neg pow eq ne lt le gt ge and_ or_ not_"
)


def export_target_refusal(target: object) -> str | None:
    """Why a ``.pt2`` graph node may not call ``target``, or ``None`` when it may.

    >>> export_target_refusal("torch.ops.aten.linear.default") is None
    True
    >>> export_target_refusal("torch.ops.aten.from_file.default")
    'calls torch.ops.aten.from_file.default, which is not an allowed operator'
    """
    if not isinstance(target, str):
        return f"has a {type(target).__name__} as its target"
    parts = target.split(".")
    if len(parts) == 5 and parts[:3] == ["torch", "ops", "aten"] and parts[3] in ATEN_OPS:
        return None
    if len(parts) == 2 and parts[0] == "_operator" and parts[1] in OPERATOR_FUNCTIONS:
        return None
    return f"calls {target}, which is not an allowed operator"
