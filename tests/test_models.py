"""Every registered model keeps the FLModel contract; the papers' models have the specs' layer sizes."""
from __future__ import annotations

import pytest
import torch
from pydantic import ValidationError
from torch import nn

from tasks.models import MODELS, build_model
from tasks.models.family import MODEL_FAMILIES, family_member

NUM_CLASSES = 10
IMAGE_MODELS_SHAPE = {"mixed_digits_cnn": (3, 28, 28), "resnet18_gn": (3, 32, 32), "vgg11": (3, 32, 32)}
TAKES_ANY_SHAPE = {"mlp", "char_rnn"}  # char_rnn: a sequence of any length
TOKEN_MODELS = {"char_rnn": (12,)}  # inputs are token ids (LEAF's 80 characters), not images


def valid_shape(name: str) -> tuple[int, ...]:
    entry = MODELS.get(name)
    if entry.input_shapes is not None:
        return entry.input_shapes[0]
    if name in TOKEN_MODELS:
        return TOKEN_MODELS[name]
    if name in IMAGE_MODELS_SHAPE:
        return IMAGE_MODELS_SHAPE[name]
    return (3, 32, 32) if name.startswith("htfe_") else (1, 8, 8)


def build(name: str, shape: tuple[int, ...] | None = None, **options) -> nn.Module:
    torch.manual_seed(0)
    return build_model(name, shape or valid_shape(name), NUM_CLASSES, options)


def batch(shape: tuple[int, ...], size: int = 4) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(1)
    if len(shape) == 1 and shape in TOKEN_MODELS.values():
        return torch.randint(80, (size, *shape), generator=gen), torch.arange(size) % NUM_CLASSES
    return torch.randn(size, *shape, generator=gen), torch.arange(size) % NUM_CLASSES


def param_count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


@pytest.mark.parametrize("name", MODELS.names())
def test_output_and_feature_shapes(name):
    model = build(name).eval()
    x, _ = batch(valid_shape(name))
    with torch.no_grad():
        assert model(x).shape == (4, NUM_CLASSES)
        assert model.features(x).shape == (4, model.feature_dim)
    assert model.num_classes == NUM_CLASSES
    assert model.classifier.in_features == model.feature_dim


@pytest.mark.parametrize("name", MODELS.names())
def test_forward_is_classifier_of_features(name):
    model = build(name).eval()
    x, _ = batch(valid_shape(name))
    with torch.no_grad():
        assert torch.allclose(model(x), model.classifier(model.features(x)), atol=1e-6)


@pytest.mark.parametrize("name", MODELS.names())
def test_extractor_parameters_exclude_classifier(name):
    model = build(name)
    extractor = {id(p) for p in model.extractor_parameters()}
    head = {id(p) for p in model.classifier.parameters()}
    assert extractor and not extractor & head
    assert len(extractor) + len(head) == len(list(model.parameters()))


@pytest.mark.parametrize("name", MODELS.names())
def test_unknown_params_are_rejected(name):
    with pytest.raises(ValidationError, match=r"no_such_option\n  Extra inputs are not permitted"):
        build(name, no_such_option=1)


@pytest.mark.parametrize("name", sorted(set(MODELS.names()) - TAKES_ANY_SHAPE))
def test_unsupported_input_shape_raises(name):
    with pytest.raises(ValueError, match=rf"^model '{name}' takes .* the data has 64$"):
        build(name, (64,))


@pytest.mark.parametrize("name", MODELS.names())
def test_sgd_steps_lower_the_loss(name):
    model = build(name).train()
    x, y = batch(valid_shape(name))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    losses = []
    for _ in range(4):
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0]


# --- the papers' layer sizes -------------------------------------------------------------------------


@pytest.mark.parametrize(("shape", "flat", "channels"), [((1, 28, 28), 512, 32), ((3, 32, 32), 1600, 64)])
def test_acar_cnn_has_the_code_sizes(shape, flat, channels):
    model = build("acar_cnn", shape)
    assert model.conv[0].out_channels == channels
    assert model.fc[0].in_features == flat and model.fc[0].out_features == 384
    assert model.feature_dim == 192


def test_acar_cnn_takes_only_its_two_shapes():
    with pytest.raises(ValueError, match=r"takes inputs of shape 1x28x28 or 3x32x32, the data has 3x28x28"):
        build("acar_cnn", (3, 28, 28))


def test_mixed_digits_cnn_sizes_and_norms():
    plain = build("mixed_digits_cnn")
    assert plain.fc[0].in_features == 6272 and plain.feature_dim == 512
    assert not any(isinstance(m, nn.BatchNorm2d | nn.GroupNorm) for m in plain.modules())
    fedbn = build("mixed_digits_cnn", norm="batch")
    assert sum(isinstance(m, nn.BatchNorm2d) for m in fedbn.modules()) == 3
    assert sum(isinstance(m, nn.BatchNorm1d) for m in fedbn.modules()) == 2


def test_resnet18_gn_projector_is_optional():
    with_projector = build("resnet18_gn", width=8)
    assert with_projector.feature_dim == 256
    assert not any(isinstance(m, nn.BatchNorm2d) for m in with_projector.modules())
    without = build("resnet18_gn", width=8, projector=False)
    assert without.feature_dim == 64
    with pytest.raises(ValidationError, match=r"without the projector feature_dim is the backbone width 512"):
        build("resnet18_gn", projector=False, feature_dim=256)


def test_vgg11_has_eight_convs_and_optional_batch_norm():
    model = build("vgg11", width=8)
    assert sum(isinstance(m, nn.Conv2d) for m in model.modules()) == 8
    assert model.feature_dim == 64
    assert sum(isinstance(m, nn.BatchNorm2d) for m in build("vgg11", width=8, batch_norm=True).modules()) == 8


def test_groupnorm_cnn_checks_groups():
    assert build("groupnorm_cnn", channels=[64, 128, 128, 128]).feature_dim == 128
    with pytest.raises(ValidationError, match=r"groups=8 must divide every entry of channels=\[12, 32\]"):
        build("groupnorm_cnn", channels=[12, 32])


# --- families ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("family", sorted(MODEL_FAMILIES))
@pytest.mark.parametrize("feature_dim", [None, 32])
def test_family_members_share_feature_dim_and_differ(family, feature_dim):
    options = {} if feature_dim is None else {"feature_dim": feature_dim}
    members = [build(name, **options) for name in MODEL_FAMILIES[family]]
    assert len(members) >= 2
    assert {m.feature_dim for m in members} == {feature_dim or 64}
    assert len({param_count(m) for m in members}) == len(members)


@pytest.mark.parametrize("family", sorted(MODEL_FAMILIES))
def test_family_features_are_post_relu(family):
    for name in MODEL_FAMILIES[family]:
        x, _ = batch(valid_shape(name))
        with torch.no_grad():
            assert (build(name).eval().features(x) >= 0).all(), name


@pytest.mark.parametrize("shape", [(1, 8, 8), (1, 10, 10), (1, 28, 28)])
def test_digits_family_takes_padded_inputs(shape):
    for name in MODEL_FAMILIES["fedsa_digits"]:
        x, _ = batch(shape)
        assert build(name, shape)(x).shape == (4, NUM_CLASSES)


@pytest.mark.parametrize("family", ["htfe", "htfe2", "htfe3"])
def test_htfe_families_take_grey_28x28_and_padded_digits(family):
    for shape in [(1, 28, 28), (1, 16, 16)]:  # MNIST; the digits padded by 4 (the digits budget's HtFE settings)
        for name in MODEL_FAMILIES[family]:
            model = build(name, shape).eval()
            x, _ = batch(shape, size=2)
            with torch.no_grad():
                assert model(x).shape == (2, NUM_CLASSES), (name, shape)
                assert model.features(x).shape == (2, 64), (name, shape)


def test_htfe2_and_htfe3_are_the_papers_groups_in_the_codes_order():
    # FedSA's and HtFLlib's main.py: HtFE2 = [FedAvgCNN, resnet18], HtFE3 = [resnet10, resnet18, resnet34];
    # member 0 is FML's and FedKD's shared model
    assert MODEL_FAMILIES["htfe2"] == ["htfe_cnn", "htfe_resnet18"]
    assert MODEL_FAMILIES["htfe3"] == ["htfe_resnet10", "htfe_resnet18", "htfe_resnet34"]
    assert [family_member("htfe3", i) for i in range(4)] == [*MODEL_FAMILIES["htfe3"], "htfe_resnet10"]
    assert "htfe_resnet34" not in MODEL_FAMILIES["htfe"]  # the five-member stand-in for HtFE5 is unchanged


def basic_blocks(model: nn.Module) -> list[nn.Module]:
    return [m for m in model.modules() if type(m).__name__ == "BasicBlock"]


def test_htfe_resnet34_has_torchvisions_block_counts_at_the_members_width():
    model = build("htfe_resnet34", (1, 28, 28))
    blocks = basic_blocks(model)
    assert len(blocks) == 3 + 4 + 6 + 3
    # stages of 16, 32, 64, 128 channels (width 16, doubled from the second stage)
    widths = [b.conv2.out_channels for b in blocks]
    assert widths == [16] * 3 + [32] * 4 + [64] * 6 + [128] * 3
    assert [len(basic_blocks(build(n, (1, 28, 28)))) for n in ("htfe_resnet10", "htfe_resnet18")] == [4, 8]
    assert model.feature_dim == 64 and model.classifier.in_features == 64
    x, _ = batch((1, 28, 28), size=3)
    with torch.no_grad():
        assert model.body(x).shape == (3, 128)  # the backbone's pooled output, averaged down to feature_dim
        assert model.features(x).shape == (3, 64)
    wide = build("htfe_resnet34", (1, 28, 28), feature_dim=128)
    assert wide.features(x).shape == (3, 128)
    with pytest.raises(ValueError, match=r"^htfe_resnet34: feature_dim 256 > backbone width 128; raise `width`$"):
        build("htfe_resnet34", feature_dim=256)


def test_htfe_rejects_feature_dim_wider_than_backbone():
    with pytest.raises(ValueError, match=r"^htfe_resnet10: feature_dim 256 > backbone width 128; raise `width`$"):
        build("htfe_resnet10", feature_dim=256)  # width 16 → backbone 128 wide


def test_family_member_cycles_through_members():
    digits = MODEL_FAMILIES["fedsa_digits"]
    assert [family_member("fedsa_digits", i) for i in range(5)] == [*digits, digits[0]]
    assert all(name in MODELS for names in MODEL_FAMILIES.values() for name in names)
    with pytest.raises(KeyError, match=r"unknown model family 'no_such_family'; allowed: "):
        family_member("no_such_family", 0)
