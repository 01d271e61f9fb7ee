// SPDX-License-Identifier: MIT
pragma solidity 0.8.37;

/// @title KeeperToken (KEEPER)
/// @notice A minimal ERC-20 whose balances are the vote weight in the
/// ExperienceRegistry. Every balance change writes a per-block checkpoint, so
/// `getPastVotes(account, blockNumber)` gives the balance an account held at
/// the end of a past block. A proposal reads weights at its snapshot block,
/// so tokens moved after the snapshot cannot vote a second time.
/// There is no delegation: an account's vote weight is its own balance.
/// Only the owner mints; nobody burns.
contract KeeperToken {
    struct Checkpoint {
        uint32 fromBlock;
        uint224 value;
    }

    string public constant name = "Keeper";
    string public constant symbol = "KEEPER";
    uint8 public constant decimals = 18;

    address public owner;
    uint256 public totalSupply;
    mapping(address => uint256) public balanceOf;
    mapping(address => mapping(address => uint256)) public allowance;

    mapping(address => Checkpoint[]) private _balanceCheckpoints;
    Checkpoint[] private _supplyCheckpoints;

    event Transfer(address indexed from, address indexed to, uint256 value);
    event Approval(address indexed owner, address indexed spender, uint256 value);
    event OwnershipTransferred(address indexed previousOwner, address indexed newOwner);

    /// The caller is not the owner.
    error NotOwner(address caller);
    /// Transfers and mints to the zero address, and a zero new owner, are refused.
    error ZeroAddress();
    /// `from` holds `balance`, less than `needed`.
    error InsufficientBalance(address from, uint256 balance, uint256 needed);
    /// `spender` may move `allowed` of the owner's tokens, less than `needed`.
    error InsufficientAllowance(address spender, uint256 allowed, uint256 needed);
    /// Past votes can only be read for blocks strictly before the current one.
    error FutureLookup(uint256 blockNumber, uint256 currentBlock);
    /// Supply (and so any balance) must fit in 224 bits.
    error SupplyOverflow();

    modifier onlyOwner() {
        if (msg.sender != owner) revert NotOwner(msg.sender);
        _;
    }

    constructor() {
        owner = msg.sender;
        emit OwnershipTransferred(address(0), msg.sender);
    }

    // ------------------------------------------------------------ ERC-20 --

    function transfer(address to, uint256 value) external returns (bool) {
        _transfer(msg.sender, to, value);
        return true;
    }

    function approve(address spender, uint256 value) external returns (bool) {
        if (spender == address(0)) revert ZeroAddress();
        allowance[msg.sender][spender] = value;
        emit Approval(msg.sender, spender, value);
        return true;
    }

    function transferFrom(address from, address to, uint256 value) external returns (bool) {
        uint256 allowed = allowance[from][msg.sender];
        if (allowed != type(uint256).max) {
            if (allowed < value) revert InsufficientAllowance(msg.sender, allowed, value);
            unchecked {
                allowance[from][msg.sender] = allowed - value;
            }
        }
        _transfer(from, to, value);
        return true;
    }

    // ------------------------------------------------------------- owner --

    function mint(address to, uint256 value) external onlyOwner {
        if (to == address(0)) revert ZeroAddress();
        uint256 newSupply = totalSupply + value;
        if (newSupply > type(uint224).max) revert SupplyOverflow();
        totalSupply = newSupply;
        balanceOf[to] += value;
        _writeCheckpoint(_supplyCheckpoints, newSupply);
        _writeCheckpoint(_balanceCheckpoints[to], balanceOf[to]);
        emit Transfer(address(0), to, value);
    }

    function transferOwnership(address newOwner) external onlyOwner {
        if (newOwner == address(0)) revert ZeroAddress();
        emit OwnershipTransferred(owner, newOwner);
        owner = newOwner;
    }

    // ------------------------------------------------------------- votes --

    /// Current vote weight (the balance).
    function getVotes(address account) external view returns (uint256) {
        return balanceOf[account];
    }

    /// Balance of `account` at the end of block `blockNumber` (< current block).
    function getPastVotes(address account, uint256 blockNumber) external view returns (uint256) {
        if (blockNumber >= block.number) revert FutureLookup(blockNumber, block.number);
        return _lookup(_balanceCheckpoints[account], blockNumber);
    }

    /// Total supply at the end of block `blockNumber` (< current block).
    function getPastTotalSupply(uint256 blockNumber) external view returns (uint256) {
        if (blockNumber >= block.number) revert FutureLookup(blockNumber, block.number);
        return _lookup(_supplyCheckpoints, blockNumber);
    }

    function numCheckpoints(address account) external view returns (uint256) {
        return _balanceCheckpoints[account].length;
    }

    // ---------------------------------------------------------- internal --

    function _transfer(address from, address to, uint256 value) private {
        if (to == address(0)) revert ZeroAddress();
        uint256 fromBal = balanceOf[from];
        if (fromBal < value) revert InsufficientBalance(from, fromBal, value);
        unchecked {
            balanceOf[from] = fromBal - value;
        }
        balanceOf[to] += value;
        _writeCheckpoint(_balanceCheckpoints[from], balanceOf[from]);
        _writeCheckpoint(_balanceCheckpoints[to], balanceOf[to]);
        emit Transfer(from, to, value);
    }

    function _writeCheckpoint(Checkpoint[] storage ckpts, uint256 value) private {
        uint256 n = ckpts.length;
        uint32 blk = uint32(block.number);
        if (n > 0 && ckpts[n - 1].fromBlock == blk) {
            ckpts[n - 1].value = uint224(value);
        } else {
            ckpts.push(Checkpoint({fromBlock: blk, value: uint224(value)}));
        }
    }

    /// Value of the last checkpoint with fromBlock <= blockNumber (0 if none).
    function _lookup(Checkpoint[] storage ckpts, uint256 blockNumber) private view returns (uint256) {
        uint256 lo = 0;
        uint256 hi = ckpts.length;
        while (lo < hi) {
            uint256 mid = (lo + hi) / 2;
            if (ckpts[mid].fromBlock > blockNumber) {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        return lo == 0 ? 0 : ckpts[lo - 1].value;
    }
}
