"""nn.Module against torch.nn's documented behaviour (key names written out by hand, no torch import):
registration, state-dict keys and order, containers, train/eval (training mode from construction),
loading, and that plain-object models and the global Tensor.training keep working."""
import numpy as np
import pytest

from tg import Tensor, nn
from tg.nn.state import StateDictError, get_parameters, get_state_dict, load_state_dict


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = nn.Linear(4, 4)
        self.norm = nn.LayerNorm(4)
        self.scale = nn.Parameter(Tensor.ones(4))

    def forward(self, x):
        return self.norm(self.attn(x)) * self.scale


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(10, 4)
        self.blocks = nn.ModuleList([Block(), Block()])
        self.heads = nn.ModuleDict({"cls": nn.Linear(4, 3), "box": nn.Linear(4, 2, bias=False)})
        self.register_buffer("step", Tensor.zeros(()))
        self.register_buffer("cache", Tensor.zeros(3), persistent=False)

    def forward(self, ids):
        x = self.embed(ids)
        for block in self.blocks:
            x = block(x)
        return self.heads["cls"](x)


NET_KEYS = ["step", "embed.weight",
            "blocks.0.scale", "blocks.0.attn.weight", "blocks.0.attn.bias", "blocks.0.norm.weight",
            "blocks.0.norm.bias",
            "blocks.1.scale", "blocks.1.attn.weight", "blocks.1.attn.bias", "blocks.1.norm.weight",
            "blocks.1.norm.bias",
            "heads.cls.weight", "heads.cls.bias", "heads.box.weight"]


def test_state_dict_keys_and_order_follow_torch():
    net = Net()
    assert list(net.state_dict()) == NET_KEYS                       # own params, own buffers, children
    assert list(get_state_dict(net)) == NET_KEYS
    assert list(net.state_dict(prefix="model.")) == [f"model.{k}" for k in NET_KEYS]
    assert [n for n, _ in net.named_buffers()] == ["step", "cache"]   # non-persistent: a buffer, not saved
    assert [n for n, _ in net.named_parameters()] == [k for k in NET_KEYS if k != "step"]
    assert [n for n, _ in net.named_children()] == ["embed", "blocks", "heads"]
    assert [n for n, _ in net.named_modules()][:5] == ["", "embed", "blocks", "blocks.0", "blocks.0.attn"]
    assert net.heads["box"].bias is None and "heads.box.bias" not in net.state_dict()
    assert net(Tensor([[1, 2]])).shape == (1, 2, 3)


def test_sequential_names_keys_by_index_and_keeps_functions():
    model = nn.Sequential(nn.Linear(2, 3), Tensor.relu, nn.BatchNorm1d(3), nn.Dropout(0.1))
    assert list(model.state_dict()) == ["0.weight", "0.bias", "2.weight", "2.bias", "2.running_mean",
                                        "2.running_var", "2.num_batches_tracked"]
    assert list(get_state_dict({"seq": model})) == [f"seq.{k}" for k in model.state_dict()]
    assert [n for n, _ in model.named_children()] == ["0", "2", "3"]
    assert model[1] is Tensor.relu and len(model) == 4 and model.layers[0] is model[0]
    assert "(1): relu" in repr(model)
    assert "(0): Linear(in_features=2, out_features=3, bias=True)" in repr(model)


def test_sequential_rejects_plain_objects_that_hold_tensors():
    class Old:
        def __init__(self):
            self.w = Tensor.ones(2, requires_grad=True)

        def __call__(self, x):
            return x * self.w

    with pytest.raises(TypeError, match=r"layer 0 \(a Old\) holds Tensors but is not an nn.Module"):
        nn.Sequential(Old())
    assert nn.Sequential(lambda x: x + 1)(Tensor([1.0])).tolist() == [2.0]


def test_module_list_operations():
    blocks = nn.ModuleList([nn.Linear(2, 2)])
    blocks.append(nn.Linear(2, 3)).extend([nn.Linear(3, 4)])
    blocks.insert(0, nn.Linear(1, 2))
    assert [b.out_features for b in blocks] == [2, 2, 3, 4] and len(blocks) == 4
    assert blocks[-1].out_features == 4 and [b.out_features for b in blocks[1:3]] == [2, 3]
    assert list(blocks.state_dict())[:4] == ["0.weight", "0.bias", "1.weight", "1.bias"]
    del blocks[0]
    assert list(blocks.state_dict())[0] == "0.weight" and blocks[0].in_features == 2
    with pytest.raises(TypeError, match=r"ModuleList: expected Modules, got a function"):
        blocks.append(Tensor.relu)


def test_module_dict_and_its_keys():
    heads = nn.ModuleDict([("train", nn.Linear(2, 2))])    # a key may shadow a method name, as in torch
    heads["b"] = nn.Linear(2, 1, bias=False)
    assert list(heads) == ["train", "b"] and "b" in heads and len(heads) == 2
    assert list(heads.state_dict()) == ["train.weight", "train.bias", "b.weight"]
    assert heads.train() is heads                            # still the method
    with pytest.raises(KeyError, match=r"ModuleDict: keys must be non-empty strs without '.'"):
        heads["a.b"] = nn.Linear(2, 2)


def test_registration_rules():
    m = nn.Module()
    m.w = Tensor.ones(2, requires_grad=True)                 # requires_grad: a parameter (tg is lenient)
    m.p = nn.Parameter(Tensor.ones(3), requires_grad=False)  # a Parameter even when frozen
    m.mask = Tensor.ones(2)                                  # a plain tensor: an attribute, as in torch
    m.size = 3
    assert [n for n, _ in m.named_parameters()] == ["w", "p"] and list(m.state_dict()) == ["w", "p"]
    m.w = Tensor.zeros(2)                                    # reassigning a parameter keeps it one
    assert m.state_dict()["w"].tolist() == [0.0, 0.0]
    del m.w
    assert list(m.state_dict()) == ["p"] and not hasattr(m, "w")
    with pytest.raises(TypeError, match=r"'p' is a parameter: expected a Tensor or None, got int"):
        m.p = 3
    with pytest.raises(TypeError, match=r"wrap it in nn.ModuleList"):
        m.layers = [nn.Linear(2, 2)]
    with pytest.raises(KeyError, match=r"name must be a non-empty str without '.'"):
        m.register_buffer("a.b", Tensor.zeros(1))

    class Early(nn.Module):
        def __init__(self):
            self.fc = nn.Linear(2, 2)
            super().__init__()
    with pytest.raises(AttributeError, match=r"before Module.__init__\(\) ran; fix: call super"):
        Early()


def test_parameter_is_a_tensor_whose_results_are_plain():
    w = nn.Parameter(Tensor([1.0, 2.0]))
    assert isinstance(w, Tensor) and w.requires_grad is True
    assert type(w * 2) is Tensor and type(w.detach()) is Tensor
    (w * w).sum().backward()
    assert w.grad.tolist() == [2.0, 4.0]


def test_shared_parameter_counts_once():
    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed, self.head = nn.Embedding(5, 3), nn.Linear(3, 5, bias=False)
            self.head.weight = self.embed.weight
    model = Tied()
    assert [n for n, _ in model.named_parameters()] == ["embed.weight"]
    assert len(list(model.parameters())) == 1 and get_parameters(model) == [model.embed.weight]
    assert list(model.state_dict()) == ["embed.weight", "head.weight"]      # torch keeps both names
    src = Tied()
    model.load_state_dict(src.state_dict())
    np.testing.assert_array_equal(model.head.weight.numpy(), src.embed.weight.numpy())


def test_get_parameters_matches_parameters_and_plain_objects_still_work():
    net = Net()
    assert {id(p) for p in get_parameters(net)} == {id(p) for p in net.parameters()}
    bn = nn.BatchNorm1d(2)
    assert get_parameters(bn) == [bn.weight, bn.bias]                       # buffers are not parameters

    class Plain:                                                            # the old style: no Module
        def __init__(self):
            self.layers = [nn.Linear(2, 2), nn.BatchNorm1d(2)]
            self.extra = Tensor.ones(1)
    plain = Plain()
    assert list(get_state_dict(plain)) == ["layers.0.weight", "layers.0.bias", "layers.1.weight",
                                           "layers.1.bias", "layers.1.running_mean", "layers.1.running_var",
                                           "layers.1.num_batches_tracked", "extra"]
    assert len(get_parameters(plain)) == 5


def test_modules_start_in_training_mode_and_train_eval_propagate(monkeypatch):
    """As torch: every module of a new model is in training mode; eval() / train() set a module and
    its submodules, whatever the global says."""
    net = Net()
    assert Tensor.training is None and all(m.training is True for m in net.modules())
    assert net.eval() is net
    assert all(m.training is False for m in net.modules())
    monkeypatch.setattr(Tensor, "training", True)
    assert all(m.training is False for m in net.modules())                  # set modes win
    net.blocks.train()
    assert net.blocks[0].attn.training is True and net.embed.training is False and net.training is False


@pytest.mark.parametrize("glob", [True, False])
def test_a_module_never_set_follows_the_global_once_code_sets_it(monkeypatch, glob):
    """tinygrad's style (Tensor.training = True around the training loop, False for eval) keeps its
    meaning for modules that train() / eval() never set; unset again, they are in training mode."""
    net = Net()
    monkeypatch.setattr(Tensor, "training", glob)
    assert all(m.training is glob for m in net.modules())
    net.blocks[0].eval()
    assert net.blocks[0].attn.training is False and net.blocks[1].norm.training is glob
    monkeypatch.setattr(Tensor, "training", None)
    assert net.training is True and net.blocks[0].training is False


def test_dropout_honours_module_mode(monkeypatch):
    x = Tensor.ones(200)
    drop = nn.Dropout(0.5)
    out = drop(x).numpy()                                                   # new: training mode
    assert set(out.tolist()) <= {0.0, 2.0} and 0 < (out == 0).sum() < 200
    assert drop.eval()(x).tolist() == x.tolist()
    out = drop.train()(x).numpy()
    assert set(out.tolist()) <= {0.0, 2.0} and 0 < (out == 0).sum() < 200
    monkeypatch.setattr(Tensor, "training", True)
    assert drop.eval()(x).tolist() == x.tolist()                            # eval() wins over the global
    assert (nn.Dropout(0.5)(x).numpy() == 0).any()                          # the old path: global training


def test_batchnorm_honours_module_mode(monkeypatch):
    x = Tensor([[1.0, 0.0], [3.0, 4.0]])
    bn = nn.BatchNorm1d(2).train()
    y = bn(x)
    np.testing.assert_allclose(y.numpy(), [[-1.0, -1.0], [1.0, 1.0]], atol=1e-4)
    np.testing.assert_allclose(bn.running_mean.numpy(), [0.2, 0.2], atol=1e-6)
    bn.eval()
    y = bn(x)                                                               # running statistics, no update
    want = (x.numpy() - [0.2, 0.2]) / np.sqrt(np.array([1.1, 1.7]) + 1e-5)
    np.testing.assert_allclose(y.numpy(), want, atol=1e-4)
    assert bn.num_batches_tracked.item() == 1
    old = nn.BatchNorm1d(2)                                                 # the old path
    monkeypatch.setattr(Tensor, "training", True)
    old(x)
    assert old.num_batches_tracked.item() == 1


def test_load_state_dict_strict_and_not():
    net = Net()
    sd = {k: np.full(t.shape, 0.5, np.float32) for k, t in Net().state_dict().items()}
    assert net.load_state_dict(sd) == ([], [])
    assert net.blocks[1].attn.weight.numpy().max() == 0.5 and net.step.item() == 0.5
    del sd["embed.weight"]
    sd["extra.weight"] = np.zeros(1, np.float32)
    with pytest.raises(StateDictError) as err:
        net.load_state_dict(sd)
    assert err.value.missing_keys == ["embed.weight"] and err.value.unexpected_keys == ["extra.weight"]
    assert "missing (in the model, not in the state dict): embed.weight" in str(err.value)
    missing, unexpected = net.load_state_dict(sd, strict=False)
    assert (missing, unexpected) == (["embed.weight"], ["extra.weight"])
    assert load_state_dict(net, net.state_dict()) == ([], [])               # the functional form too


def test_apply_zero_grad_requires_grad_and_to():
    model = nn.Sequential(nn.Linear(3, 4), Tensor.relu, nn.Linear(4, 1))
    seen = []

    def init(m):
        seen.append(type(m).__name__)
        if isinstance(m, nn.Linear):
            m.weight.assign(Tensor.full(m.weight.shape, 0.5))
    assert model.apply(init) is model and seen == ["Linear", "Linear", "Sequential"]
    assert model[2].weight.tolist() == [[0.5] * 4]
    model(Tensor.ones(2, 3)).sum().backward()
    assert all(p.grad is not None for p in model.parameters())
    model.zero_grad(set_to_none=False)
    assert all(p.grad is not None and not p.grad.numpy().any() for p in model.parameters())
    model.zero_grad()
    assert all(p.grad is None for p in model.parameters())
    assert not any(p.requires_grad for p in model.requires_grad_(False).parameters())
    weight = model[0].weight
    assert model.to("CPU") is model and model[0].weight is weight and weight.device == "CPU"


def test_a_module_trains_with_sgd():
    rng = np.random.default_rng(0)
    x = Tensor(rng.standard_normal((32, 4)).astype(np.float32))
    y = Tensor((x.numpy() @ rng.standard_normal((4, 1))).astype(np.float32))

    class MLP(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = nn.Sequential(nn.Linear(4, 16), Tensor.relu, nn.Dropout(0.1))
            self.head = nn.Linear(16, 1)

        def forward(self, x):
            return self.head(self.body(x))
    model = MLP().train()
    opt = nn.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for _ in range(15):
        opt.zero_grad()
        loss = (model(x) - y).square().mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0] * 0.5, losses
