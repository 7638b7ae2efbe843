# A torch script as its user wrote it: the import order and line lengths are the script's, not tg's style.
# ruff: noqa: E501, I001
"""An MNIST-style CNN (conv, dropout, max-pool, log-softmax, nll_loss, Adadelta + StepLR), ported from
a torch script by changing its imports only. The data are synthetic 28x28 images with no download:
the class is the quadrant of the image that holds a bright square."""
import argparse

import tg as torch                                  # import torch
import tg.nn as nn                                  # import torch.nn as nn
import tg.nn.functional as F                        # import torch.nn.functional as F
import tg.optim as optim                            # import torch.optim as optim
from tg.optim.lr_scheduler import StepLR            # from torch.optim.lr_scheduler import StepLR
from tg.utils.data import DataLoader, TensorDataset  # from torch.utils.data import DataLoader, TensorDataset
# --- end of imports: nothing below names the framework except through these names


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 3, 1)
        self.conv2 = nn.Conv2d(8, 16, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(16 * 5 * 5, 32)
        self.fc2 = nn.Linear(32, 4)

    def forward(self, x):
        x = self.conv1(x)
        x = F.relu(x)
        x = F.max_pool2d(x, 2)
        x = self.conv2(x)
        x = F.relu(x)
        x = F.max_pool2d(x, 2)
        x = self.dropout1(x)
        x = torch.flatten(x, 1)
        x = self.fc1(x)
        x = F.relu(x)
        x = self.dropout2(x)
        x = self.fc2(x)
        output = F.log_softmax(x, dim=1)
        return output


def quadrant_images(n, generator):
    """n noisy 28x28 images; label k in 0..3 = the quadrant that holds a bright 8x8 square."""
    images = torch.rand(n, 1, 28, 28, generator=generator) * 0.3
    labels = torch.randint(0, 4, (n,), generator=generator)
    rows = [2, 2, 16, 16]
    cols = [2, 16, 2, 16]
    masks = []
    for k in range(4):
        mask = torch.zeros(1, 1, 28, 28)
        mask[:, :, rows[k]:rows[k] + 8, cols[k]:cols[k] + 8] = 1.0
        masks.append(mask)
    masks = torch.cat(masks, dim=0)                      # (4, 1, 28, 28)
    images = images + masks[labels]
    images = (images - 0.1307) / 0.3081
    return images, labels


def train(args, model, device, train_loader, optimizer, epoch, losses):
    model.train()
    for batch_idx, (data, target) in enumerate(train_loader):
        data, target = data.to(device), target.to(device)
        optimizer.zero_grad()
        output = model(data)
        loss = F.nll_loss(output, target)
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
        if batch_idx % args.log_interval == 0:
            print('Train Epoch: {} [{}/{} ({:.0f}%)]\tLoss: {:.6f}'.format(
                epoch, batch_idx * len(data), len(train_loader.dataset),
                100. * batch_idx / len(train_loader), loss.item()))
            if args.dry_run:
                break


def test(model, device, test_loader):
    model.eval()
    test_loss = 0
    correct = 0
    with torch.no_grad():
        for data, target in test_loader:
            data, target = data.to(device), target.to(device)
            output = model(data)
            test_loss += F.nll_loss(output, target, reduction='sum').item()  # sum up batch loss
            pred = output.argmax(dim=1, keepdim=True)  # get the index of the max log-probability
            correct += pred.eq(target.view_as(pred)).sum().item()

    test_loss /= len(test_loader.dataset)
    accuracy = 100. * correct / len(test_loader.dataset)
    print('\nTest set: Average loss: {:.4f}, Accuracy: {}/{} ({:.0f}%)\n'.format(
        test_loss, correct, len(test_loader.dataset), accuracy))
    return test_loss, accuracy


def main():
    parser = argparse.ArgumentParser(description='MNIST-style example on synthetic quadrant images')
    parser.add_argument('--batch-size', type=int, default=32, metavar='N')
    parser.add_argument('--test-batch-size', type=int, default=64, metavar='N')
    parser.add_argument('--epochs', type=int, default=2, metavar='N')
    parser.add_argument('--lr', type=float, default=1.0, metavar='LR')
    parser.add_argument('--gamma', type=float, default=0.7, metavar='M')
    parser.add_argument('--train-size', type=int, default=256)
    parser.add_argument('--test-size', type=int, default=128)
    parser.add_argument('--dry-run', action='store_true', default=False)
    parser.add_argument('--seed', type=int, default=1, metavar='S')
    parser.add_argument('--log-interval', type=int, default=2, metavar='N')
    parser.add_argument('--save-model', action='store_true', default=False)
    args = parser.parse_args()

    torch.manual_seed(args.seed)
    device = torch.device("cpu")

    g = torch.Generator().manual_seed(args.seed)
    train_x, train_y = quadrant_images(args.train_size, g)
    test_x, test_y = quadrant_images(args.test_size, g)
    train_loader = DataLoader(TensorDataset(train_x, train_y), batch_size=args.batch_size, shuffle=True)
    test_loader = DataLoader(TensorDataset(test_x, test_y), batch_size=args.test_batch_size)

    model = Net().to(device)
    optimizer = optim.Adadelta(model.parameters(), lr=args.lr)

    scheduler = StepLR(optimizer, step_size=1, gamma=args.gamma)
    losses = []
    first_test_loss, _ = test(model, device, test_loader)
    for epoch in range(1, args.epochs + 1):
        train(args, model, device, train_loader, optimizer, epoch, losses)
        test_loss, accuracy = test(model, device, test_loader)
        scheduler.step()

    if args.save_model:
        torch.save(model.state_dict(), "mnist_cnn.pt")

    print("first train loss {:.4f} last train loss {:.4f}".format(losses[0], losses[-1]))
    print("final test accuracy {:.1f}%".format(accuracy))
    assert test_loss < first_test_loss, (first_test_loss, test_loss)
    assert accuracy > 50.0, accuracy  # chance is 25%
    print("RESULT ok")


if __name__ == '__main__':
    main()
