// SPDX-License-Identifier: MIT
pragma solidity 0.8.37;

import {TestBase} from "./Vm.sol";
import {KeeperToken} from "../src/KeeperToken.sol";

contract KeeperTokenTest is TestBase {
    KeeperToken internal token;

    address internal constant ALICE = address(0xA11CE);
    address internal constant BOB = address(0xB0B);
    address internal constant CAROL = address(0xCA201);

    function setUp() public {
        token = new KeeperToken();
        token.mint(ALICE, 100);
    }

    function test_Metadata() public view {
        vm.assertEq(keccak256(bytes(token.symbol())), keccak256("KEEPER"), "symbol");
        vm.assertEq(uint256(token.decimals()), 18, "decimals");
        vm.assertEq(token.owner(), address(this), "owner is the deployer");
    }

    function test_MintOnlyOwner() public {
        vm.assertEq(token.totalSupply(), 100, "supply");
        vm.assertEq(token.balanceOf(ALICE), 100, "balance");
        vm.expectRevert(abi.encodeWithSelector(KeeperToken.NotOwner.selector, ALICE));
        vm.prank(ALICE);
        token.mint(ALICE, 1);
        vm.expectRevert(abi.encodeWithSelector(KeeperToken.ZeroAddress.selector));
        token.mint(address(0), 1);
        token.transferOwnership(BOB);
        vm.prank(BOB);
        token.mint(CAROL, 5);
        vm.assertEq(token.totalSupply(), 105, "bob minted");
        vm.expectRevert(abi.encodeWithSelector(KeeperToken.NotOwner.selector, address(this)));
        token.mint(CAROL, 5);
    }

    function test_MintEmitsTransfer() public {
        vm.expectEmit(true, true, true, true, address(token));
        emit KeeperToken.Transfer(address(0), BOB, 7);
        token.mint(BOB, 7);
    }

    function test_MintSupplyCap() public {
        vm.expectRevert(abi.encodeWithSelector(KeeperToken.SupplyOverflow.selector));
        token.mint(BOB, uint256(type(uint224).max));
    }

    function test_Transfer() public {
        vm.expectEmit(true, true, true, true, address(token));
        emit KeeperToken.Transfer(ALICE, BOB, 30);
        vm.prank(ALICE);
        vm.assertTrue(token.transfer(BOB, 30), "returns true");
        vm.assertEq(token.balanceOf(ALICE), 70, "alice");
        vm.assertEq(token.balanceOf(BOB), 30, "bob");
        vm.assertEq(token.totalSupply(), 100, "supply unchanged");

        vm.expectRevert(abi.encodeWithSelector(KeeperToken.InsufficientBalance.selector, BOB, 30, 31));
        vm.prank(BOB);
        token.transfer(CAROL, 31);
        vm.expectRevert(abi.encodeWithSelector(KeeperToken.ZeroAddress.selector));
        vm.prank(BOB);
        token.transfer(address(0), 1);
    }

    function test_ApproveAndTransferFrom() public {
        vm.expectEmit(true, true, true, true, address(token));
        emit KeeperToken.Approval(ALICE, BOB, 50);
        vm.prank(ALICE);
        token.approve(BOB, 50);
        vm.assertEq(token.allowance(ALICE, BOB), 50, "allowance");

        vm.prank(BOB);
        token.transferFrom(ALICE, CAROL, 20);
        vm.assertEq(token.allowance(ALICE, BOB), 30, "allowance spent");
        vm.assertEq(token.balanceOf(CAROL), 20, "carol");
        vm.assertEq(token.balanceOf(ALICE), 80, "alice");

        vm.expectRevert(abi.encodeWithSelector(KeeperToken.InsufficientAllowance.selector, BOB, 30, 31));
        vm.prank(BOB);
        token.transferFrom(ALICE, CAROL, 31);
        vm.expectRevert(abi.encodeWithSelector(KeeperToken.InsufficientAllowance.selector, CAROL, 0, 1));
        vm.prank(CAROL);
        token.transferFrom(ALICE, CAROL, 1);
    }

    function test_InfiniteAllowanceIsNotSpent() public {
        vm.prank(ALICE);
        token.approve(BOB, type(uint256).max);
        vm.prank(BOB);
        token.transferFrom(ALICE, BOB, 10);
        vm.assertEq(token.allowance(ALICE, BOB), type(uint256).max, "still max");
    }

    function test_PastVotesFollowBlocks() public {
        uint256 b0 = block.number; // mint to Alice happened here
        vm.roll(b0 + 1);
        vm.prank(ALICE);
        token.transfer(BOB, 10);
        vm.prank(ALICE);
        token.transfer(BOB, 5); // same block: one checkpoint, last value wins
        vm.roll(b0 + 5);
        token.mint(CAROL, 50);
        vm.roll(b0 + 6);

        vm.assertEq(token.getPastVotes(ALICE, b0 - 1), 0, "before mint");
        vm.assertEq(token.getPastVotes(ALICE, b0), 100, "after mint");
        vm.assertEq(token.getPastVotes(ALICE, b0 + 1), 85, "after transfers");
        vm.assertEq(token.getPastVotes(BOB, b0), 0, "bob before");
        vm.assertEq(token.getPastVotes(BOB, b0 + 3), 15, "bob between checkpoints");
        vm.assertEq(token.getPastVotes(CAROL, b0 + 4), 0, "carol before mint");
        vm.assertEq(token.getPastVotes(CAROL, b0 + 5), 50, "carol after mint");
        vm.assertEq(token.numCheckpoints(BOB), 1, "one checkpoint per block");
        vm.assertEq(token.getPastTotalSupply(b0 + 4), 100, "supply before");
        vm.assertEq(token.getPastTotalSupply(b0 + 5), 150, "supply after");
        vm.assertEq(token.getVotes(ALICE), 85, "current votes");
    }

    function test_PastVotesRejectsCurrentAndFutureBlocks() public {
        vm.expectRevert(abi.encodeWithSelector(KeeperToken.FutureLookup.selector, block.number, block.number));
        token.getPastVotes(ALICE, block.number);
        vm.expectRevert(abi.encodeWithSelector(KeeperToken.FutureLookup.selector, block.number + 1, block.number));
        token.getPastTotalSupply(block.number + 1);
    }
}
